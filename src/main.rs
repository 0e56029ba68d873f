//! `tidepool`: the command line (`cli`) -> config -> server, or `tidepool db`.

use tidepool::cli::{self, Cmd};

fn main() {
    let args = cli::parse();
    let result = match args.command {
        _ if args.version => {
            println!("{}", cli::version_line());
            Ok(())
        }
        Some(Cmd::Serve(s)) => s.config().and_then(tidepool::server::run),
        Some(Cmd::Db(db)) => tidepool::admin_cli::run(db),
        Some(Cmd::Cluster(c)) => tidepool::admin_cli::cluster(c),
        None => {
            let _ = cli::command().print_help();
            std::process::exit(2);
        }
    };
    if let Err(e) = result {
        eprintln!("tidepool: {e}");
        std::process::exit(2);
    }
}
