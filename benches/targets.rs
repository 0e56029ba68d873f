//! Issue 27's targets, judged in one run. Each benchmark form that measures one of them records
//! it here with its figure and its bound; `--targets` runs every such form in turn and prints,
//! after their own tables, one table of the targets: hard ones (which must hold) and goals.

/// Whether a target must hold or is a goal.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Hard,
    Goal,
}

struct Row {
    kind: Kind,
    measure: String,
    figure: String,
    bound: String,
    met: bool,
}

/// The targets measured so far in this run.
#[derive(Default)]
pub struct Targets {
    rows: Vec<Row>,
}

impl Targets {
    /// `value` must be at least `min`; `figure` is how the value reads in the table.
    pub fn at_least(&mut self, kind: Kind, measure: &str, value: f64, figure: String, min: f64) {
        self.push(
            kind,
            measure,
            figure,
            format!(">= {}", show(min)),
            value >= min,
        );
    }

    /// `value` must be at most `max`.
    pub fn at_most(&mut self, kind: Kind, measure: &str, value: f64, figure: String, max: f64) {
        self.push(
            kind,
            measure,
            figure,
            format!("<= {}", show(max)),
            value <= max,
        );
    }

    /// `value` must lie within `within` (a fraction) of 1.0.
    pub fn near_one(&mut self, kind: Kind, measure: &str, value: f64, figure: String, within: f64) {
        let bound = format!("{}-{}", show(1.0 - within), show(1.0 + within));
        self.push(kind, measure, figure, bound, (value - 1.0).abs() <= within);
    }

    fn push(&mut self, kind: Kind, measure: &str, figure: String, bound: String, met: bool) {
        // A NaN (a phase that saw nothing) compares false above: not met, as it should read.
        self.rows.push(Row {
            kind,
            measure: measure.to_string(),
            figure,
            bound,
            met,
        });
    }

    /// The hard targets not met.
    pub fn missed(&self) -> usize {
        self.rows
            .iter()
            .filter(|r| r.kind == Kind::Hard && !r.met)
            .count()
    }

    pub fn print(&self) {
        println!("| target | kind | this run | bound | met |");
        println!("|---|---|---|---|---|");
        for r in &self.rows {
            let kind = match r.kind {
                Kind::Hard => "hard",
                Kind::Goal => "goal",
            };
            let met = if r.met { "yes" } else { "**no**" };
            println!(
                "| {} | {kind} | {} | {} | {met} |",
                r.measure, r.figure, r.bound
            );
        }
    }
}

/// A bound as the table shows it: a ratio with two decimals, a count with thousands marked.
fn show(v: f64) -> String {
    if v.fract() != 0.0 || v < 10.0 {
        format!("{v:.2}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    } else {
        thousands(v)
    }
}

/// `v` rounded, with commas between the thousands.
pub fn thousands(v: f64) -> String {
    let digits = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0.0 {
        out.insert(0, '-');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_and_verdicts_read_as_written() {
        assert_eq!(thousands(2_092_172.4), "2,092,172");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(show(0.75), "0.75");
        assert_eq!(show(1.5), "1.5");
        assert_eq!(show(20_000.0), "20,000");
        let mut t = Targets::default();
        t.at_least(Kind::Hard, "a", 0.74, "0.74x".into(), 0.75);
        t.at_most(Kind::Hard, "b", 5.0, "5 ms".into(), 5.0);
        t.near_one(Kind::Hard, "c", 1.11, "1.11x".into(), 0.1);
        t.at_least(Kind::Goal, "d", f64::NAN, "none".into(), 1.0);
        assert_eq!(
            t.rows.iter().map(|r| r.met).collect::<Vec<_>>(),
            [false, true, false, false]
        );
        assert_eq!(t.missed(), 2);
    }
}
