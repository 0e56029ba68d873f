//! Geo commands: positions live in a sorted set as Redis's 52-bit geohash scores (so ZRANGE on a
//! geo key matches Redis), with Redis's encoding, haversine distance and reply formats
//! (geohash.c, geohash_helper.c, geo.c).

use super::args::is;
use super::args::tri;
use super::ctx::Ctx;
use super::longdouble;
use crate::num::parse_double;
use crate::reply::{errors, Reply};
use crate::state::zset::ZSet;
use crate::state::Value;

const STEP: u32 = 26;
const LAT_MIN: f64 = -85.05112878;
const LAT_MAX: f64 = 85.05112878;
const LONG_MIN: f64 = -180.0;
const LONG_MAX: f64 = 180.0;
const EARTH_RADIUS_M: f64 = 6372797.560856;
const D_R: f64 = std::f64::consts::PI / 180.0;

fn interleave(x: u32, y: u32) -> u64 {
    let spread = |v: u32| {
        let mut v = v as u64;
        v = (v | (v << 16)) & 0x0000_FFFF_0000_FFFF;
        v = (v | (v << 8)) & 0x00FF_00FF_00FF_00FF;
        v = (v | (v << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
        v = (v | (v << 2)) & 0x3333_3333_3333_3333;
        (v | (v << 1)) & 0x5555_5555_5555_5555
    };
    spread(x) | (spread(y) << 1)
}

fn deinterleave(v: u64) -> (u32, u32) {
    let squash = |mut v: u64| {
        v &= 0x5555_5555_5555_5555;
        v = (v | (v >> 1)) & 0x3333_3333_3333_3333;
        v = (v | (v >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
        v = (v | (v >> 4)) & 0x00FF_00FF_00FF_00FF;
        v = (v | (v >> 8)) & 0x0000_FFFF_0000_FFFF;
        ((v | (v >> 16)) & 0x0000_0000_FFFF_FFFF) as u32
    };
    (squash(v), squash(v >> 1))
}

/// `geohashEncode` with the given ranges (Redis's own latitude range, or the standard one).
fn encode(lon: f64, lat: f64, lat_min: f64, lat_max: f64) -> u64 {
    let lat_off = (lat - lat_min) / (lat_max - lat_min) * (1u64 << STEP) as f64;
    let lon_off = (lon - LONG_MIN) / (LONG_MAX - LONG_MIN) * (1u64 << STEP) as f64;
    interleave(lat_off as u32, lon_off as u32)
}

/// The cell center of a 52-bit score, clamped as `geohashDecodeAreaToLongLat` does.
pub fn decode(score: f64) -> (f64, f64) {
    let (ilat, ilon) = deinterleave(score as u64);
    let scale = (1u64 << STEP) as f64;
    let lat_min = LAT_MIN + (ilat as f64 / scale) * (LAT_MAX - LAT_MIN);
    let lat_max = LAT_MIN + ((ilat as f64 + 1.0) / scale) * (LAT_MAX - LAT_MIN);
    let lon_min = LONG_MIN + (ilon as f64 / scale) * (LONG_MAX - LONG_MIN);
    let lon_max = LONG_MIN + ((ilon as f64 + 1.0) / scale) * (LONG_MAX - LONG_MIN);
    let lon = ((lon_min + lon_max) / 2.0).clamp(LONG_MIN, LONG_MAX);
    let lat = ((lat_min + lat_max) / 2.0).clamp(LAT_MIN, LAT_MAX);
    (lon, lat)
}

fn lat_distance(lat1: f64, lat2: f64) -> f64 {
    EARTH_RADIUS_M * (lat2 * D_R - lat1 * D_R).abs()
}

/// `geohashGetDistance`.
fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let v = ((lon2 * D_R - lon1 * D_R) / 2.0).sin();
    if v == 0.0 {
        return lat_distance(lat1, lat2);
    }
    let (lat1r, lat2r) = (lat1 * D_R, lat2 * D_R);
    let u = ((lat2r - lat1r) / 2.0).sin();
    let a = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS_M * a.sqrt().asin()
}

fn human(x: f64) -> Reply {
    Reply::Bulk(longdouble::format_human(longdouble::from_f64(x)).into_bytes())
}

fn coord_reply(lon: f64, lat: f64) -> Reply {
    Reply::Array(vec![human(lon), human(lat)])
}

fn unit(arg: &[u8]) -> Result<f64, Reply> {
    let u = arg.to_ascii_lowercase();
    match u.as_slice() {
        b"m" => Ok(1.0),
        b"km" => Ok(1000.0),
        b"ft" => Ok(0.3048),
        b"mi" => Ok(1609.34),
        _ => Err(Reply::err(
            "ERR unsupported unit provided. please use M, KM, FT, MI",
        )),
    }
}

/// `extractDistanceOrReply`: a radius and its unit, as (radius in meters, unit in meters).
fn radius(r: &[u8], u: &[u8]) -> Result<(Shape, f64), Reply> {
    let r = parse_double(r).ok_or_else(|| Reply::err("ERR need numeric radius"))?;
    if r < 0.0 {
        return Err(Reply::err("ERR radius cannot be negative"));
    }
    let u = unit(u)?;
    Ok((Shape::Radius(r * u), u))
}

fn dist_reply(d: f64) -> Reply {
    Reply::Bulk(format!("{d:.4}").into_bytes())
}

/// `extractLongLatOrReply`.
fn lon_lat(lon: &[u8], lat: &[u8]) -> Result<(f64, f64), Reply> {
    let (Some(x), Some(y)) = (parse_double(lon), parse_double(lat)) else {
        return Err(Reply::err(errors::NOT_FLOAT));
    };
    if !(LONG_MIN..=LONG_MAX).contains(&x) || !(LAT_MIN..=LAT_MAX).contains(&y) {
        return Err(Reply::Error(format!(
            "ERR invalid longitude,latitude pair {x:.6},{y:.6}"
        )));
    }
    Ok((x, y))
}

/// `GEOADD key [NX|XX] [CH] longitude latitude member [...]`: ZADD with geohash scores.
pub fn geoadd(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let mut i = 2;
    let (mut nx, mut xx) = (false, false);
    let mut zadd: Vec<Vec<u8>> = vec![b"ZADD".to_vec(), a[1].clone()];
    while i < a.len() {
        if is(&a[i], "nx") {
            nx = true;
        } else if is(&a[i], "xx") {
            xx = true;
        } else if !is(&a[i], "ch") {
            break;
        }
        zadd.push(a[i].clone());
        i += 1;
    }
    if !(a.len() - i).is_multiple_of(3) || (xx && nx) {
        return Reply::err(errors::SYNTAX);
    }
    for t in a[i..].chunks(3) {
        let (lon, lat) = tri!(lon_lat(&t[0], &t[1]));
        zadd.push(encode(lon, lat, LAT_MIN, LAT_MAX).to_string().into_bytes());
        zadd.push(t[2].clone());
    }
    super::zsets::zadd(ctx, &zadd, false)
}

pub fn geopos(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let z = tri!(super::typed::read::<ZSet>(ctx.db, &a[1], ctx.now_ms));
    Reply::Array(
        a[2..]
            .iter()
            .map(|m| match z.and_then(|z| z.score(m)) {
                Some(s) => {
                    let (lon, lat) = decode(s);
                    coord_reply(lon, lat)
                }
                None => Reply::NilArray,
            })
            .collect(),
    )
}

pub fn geodist(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let to_m = match a.len() {
        4 => 1.0,
        5 => tri!(unit(&a[4])),
        _ => return Reply::err(errors::SYNTAX),
    };
    let Some(z) = tri!(super::typed::read::<ZSet>(ctx.db, &a[1], ctx.now_ms)) else {
        return Reply::Nil;
    };
    match (z.score(&a[2]), z.score(&a[3])) {
        (Some(s1), Some(s2)) => {
            let ((lon1, lat1), (lon2, lat2)) = (decode(s1), decode(s2));
            dist_reply(distance(lon1, lat1, lon2, lat2) / to_m)
        }
        _ => Reply::Nil,
    }
}

pub fn geohash(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    const ALPHABET: &[u8] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let z = tri!(super::typed::read::<ZSet>(ctx.db, &a[1], ctx.now_ms));
    Reply::Array(
        a[2..]
            .iter()
            .map(|m| match z.and_then(|z| z.score(m)) {
                None => Reply::Nil,
                Some(s) => {
                    let (lon, lat) = decode(s);
                    let bits = encode(lon, lat, -90.0, 90.0);
                    let hash: Vec<u8> = (0..11)
                        .map(|i| {
                            if i == 10 {
                                ALPHABET[0]
                            } else {
                                ALPHABET[((bits >> (52 - (i + 1) * 5)) & 0x1f) as usize]
                            }
                        })
                        .collect();
                    Reply::Bulk(hash)
                }
            })
            .collect(),
    )
}

enum Shape {
    Radius(f64),
    Box(f64, f64),
}

#[derive(PartialEq, Clone, Copy)]
enum Sort {
    None,
    Asc,
    Desc,
}

/// Which of the geo search commands runs.
#[derive(Debug, Clone, Copy)]
pub struct Form {
    /// GEOSEARCH's grammar (FROMMEMBER/FROMLONLAT, BYRADIUS/BYBOX), not GEORADIUS's.
    pub search: bool,
    /// GEOSEARCHSTORE: the destination comes first.
    pub store: bool,
    /// GEORADIUSBYMEMBER: the center is a member.
    pub by_member: bool,
    /// A read-only form: STORE and STOREDIST are refused.
    pub ro: bool,
}

impl Form {
    const fn new(search: bool, store: bool, by_member: bool, ro: bool) -> Form {
        Form {
            search,
            store,
            by_member,
            ro,
        }
    }
    pub const GEOSEARCH: Form = Form::new(true, false, false, true);
    pub const GEOSEARCHSTORE: Form = Form::new(true, true, false, false);
    pub const GEORADIUS: Form = Form::new(false, false, false, false);
    pub const GEORADIUS_RO: Form = Form::new(false, false, false, true);
    pub const GEORADIUSBYMEMBER: Form = Form::new(false, false, true, false);
    pub const GEORADIUSBYMEMBER_RO: Form = Form::new(false, false, true, true);
}

/// GEOSEARCH, GEOSEARCHSTORE, `GEORADIUS[_RO]`, `GEORADIUSBYMEMBER[_RO]`: Redis's
/// `georadiusGeneric`, in the `form` given.
pub fn search(ctx: &mut Ctx, a: &[Vec<u8>], form: Form) -> Reply {
    let Form {
        search: search_form,
        store: store_form,
        by_member,
        ro,
    } = form;
    let src_at = if store_form { 2 } else { 1 };
    let key = &a[src_at];
    let now = ctx.now_ms;
    // As georadiusGeneric: the key first, then the positional center and radius, then options.
    let zobj: Option<&ZSet> = tri!(super::typed::read::<ZSet>(ctx.db, key, now));
    let z = zobj;
    let member_xy = |m: &[u8]| z.and_then(|z| z.score(m)).map(decode);
    let mut center: Option<(f64, f64)> = None;
    let mut shape: Option<(Shape, f64)> = None;
    let base;
    if search_form {
        base = src_at + 1;
    } else if !by_member {
        center = Some(tri!(lon_lat(&a[2], &a[3])));
        shape = Some(tri!(radius(&a[4], &a[5])));
        base = 6;
    } else {
        base = 5;
        if z.is_some() {
            match member_xy(&a[2]) {
                Some(xy) => center = Some(xy),
                None => return Reply::err("ERR could not decode requested zset member"),
            }
            shape = Some(tri!(radius(&a[3], &a[4])));
        }
    }
    let (mut withdist, mut withhash, mut withcoord, mut any) = (false, false, false, false);
    let (mut frommember, mut fromloc, mut byradius, mut bybox) = (false, false, false, false);
    let mut sort = Sort::None;
    let mut count: i64 = 0;
    let mut store: Option<(Vec<u8>, bool)> = if store_form {
        Some((a[1].clone(), false))
    } else {
        None
    };
    let remaining = a.len().saturating_sub(base);
    let mut i = 0;
    while i < remaining {
        let o = &a[base + i];
        let left = remaining - i - 1;
        if is(o, "withdist") {
            withdist = true;
        } else if is(o, "withhash") {
            withhash = true;
        } else if is(o, "withcoord") {
            withcoord = true;
        } else if is(o, "any") {
            any = true;
        } else if is(o, "asc") {
            sort = Sort::Asc;
        } else if is(o, "desc") {
            sort = Sort::Desc;
        } else if is(o, "count") && left >= 1 {
            let Some(n) = crate::num::parse_i64(&a[base + i + 1]) else {
                return Reply::err(errors::NOT_INTEGER);
            };
            if n <= 0 {
                return Reply::err("ERR COUNT must be > 0");
            }
            count = n;
            i += 1;
        } else if !ro && !search_form && is(o, "store") && left >= 1 {
            store = Some((a[base + i + 1].clone(), false));
            i += 1;
        } else if !ro && !search_form && is(o, "storedist") && left >= 1 {
            store = Some((a[base + i + 1].clone(), true));
            i += 1;
        } else if store_form && is(o, "storedist") {
            store = store.map(|(k, _)| (k, true));
        } else if search_form && is(o, "frommember") && left >= 1 && !fromloc {
            if z.is_some() {
                match member_xy(&a[base + i + 1]) {
                    Some(xy) => center = Some(xy),
                    None => return Reply::err("ERR could not decode requested zset member"),
                }
            }
            frommember = true;
            i += 1;
        } else if search_form && is(o, "fromlonlat") && left >= 2 && !frommember {
            center = Some(tri!(lon_lat(&a[base + i + 1], &a[base + i + 2])));
            fromloc = true;
            i += 2;
        } else if search_form && is(o, "byradius") && left >= 2 && !bybox {
            shape = Some(tri!(radius(&a[base + i + 1], &a[base + i + 2])));
            byradius = true;
            i += 2;
        } else if search_form && is(o, "bybox") && left >= 3 && !byradius {
            let (Some(w), Some(h)) = (
                parse_double(&a[base + i + 1]),
                parse_double(&a[base + i + 2]),
            ) else {
                return Reply::err(if parse_double(&a[base + i + 1]).is_none() {
                    "ERR need numeric width"
                } else {
                    "ERR need numeric height"
                });
            };
            if w < 0.0 || h < 0.0 {
                return Reply::err("ERR height or width cannot be negative");
            }
            let u = tri!(unit(&a[base + i + 3]));
            shape = Some((Shape::Box(w * u, h * u), u));
            bybox = true;
            i += 3;
        } else {
            return Reply::err(errors::SYNTAX);
        }
        i += 1;
    }
    if store.is_some() && (withdist || withhash || withcoord) {
        let what = if store_form {
            "GEOSEARCHSTORE"
        } else {
            "STORE option in GEORADIUS"
        };
        return Reply::Error(format!(
            "ERR {what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
        ));
    }
    let name = String::from_utf8_lossy(&a[0]);
    if search_form && !(frommember || fromloc) {
        return Reply::Error(format!(
            "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}"
        ));
    }
    if search_form && !(byradius || bybox) {
        return Reply::Error(format!(
            "ERR exactly one of BYRADIUS and BYBOX can be specified for {name}"
        ));
    }
    if any && count == 0 {
        return Reply::err("ERR the ANY argument requires COUNT argument");
    }
    let Some(z) = z else {
        return match store {
            Some((dst, _)) => {
                if ctx.db.get_mut(&dst, now).is_some() {
                    ctx.store_or_delete(&dst, None);
                }
                Reply::Int(0)
            }
            None => Reply::Array(vec![]),
        };
    };
    let (Some((clon, clat)), Some((shape, to_unit))) = (center, shape) else {
        return Reply::err(errors::SYNTAX);
    };
    if count != 0 && sort == Sort::None && !any {
        sort = Sort::Asc;
    }
    let mut hits: Vec<(Vec<u8>, f64, f64, f64, f64)> = Vec::new(); // member, dist m, score, lon, lat
    for (m, s) in z.iter() {
        let (lon, lat) = decode(s);
        let d = match shape {
            Shape::Radius(r) => {
                let d = distance(clon, clat, lon, lat);
                if d > r {
                    continue;
                }
                d
            }
            Shape::Box(w, h) => {
                if lat_distance(lat, clat) > h / 2.0 || distance(lon, lat, clon, lat) > w / 2.0 {
                    continue;
                }
                distance(clon, clat, lon, lat)
            }
        };
        hits.push((m.to_vec(), d, s, lon, lat));
        if any && hits.len() as i64 >= count {
            break;
        }
    }
    match sort {
        Sort::Asc => hits.sort_by(|x, y| x.1.total_cmp(&y.1)),
        Sort::Desc => hits.sort_by(|x, y| y.1.total_cmp(&x.1)),
        Sort::None => {}
    }
    if count > 0 {
        hits.truncate(count as usize);
    }
    if let Some((dst, storedist)) = store {
        let mut out = ZSet::computed();
        for (m, d, s, _, _) in &hits {
            out.insert(m, if storedist { d / to_unit } else { *s });
        }
        let out = out.into_stored();
        let n = out.len();
        ctx.store_or_delete(&dst, (n > 0).then_some(Value::ZSet(Box::new(out))));
        return Reply::Int(n as i64);
    }
    Reply::Array(
        hits.into_iter()
            .map(|(m, d, s, lon, lat)| {
                if !(withdist || withhash || withcoord) {
                    return Reply::Bulk(m);
                }
                let mut item = vec![Reply::Bulk(m)];
                if withdist {
                    item.push(dist_reply(d / to_unit));
                }
                if withhash {
                    item.push(Reply::Int(s as i64));
                }
                if withcoord {
                    item.push(coord_reply(lon, lat));
                }
                Reply::Array(item)
            })
            .collect(),
    )
}
