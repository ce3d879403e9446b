//! What counting key activity costs on every layout's ingest and every
//! query (`--counters`): one store, the counters on, off and off again
//! (`FjallStore::count_key_activity`), in an order that rotates each
//! round, so that the machine's slow spells and the store's background
//! work fall on each arm alike; the ratio of the two arms off is the run's
//! own noise. Every arm's answer is checked equal.
//!
//! Under `cargo test` (untimed) one round on the tiny data set checks that
//! the three arms load and answer alike.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use cellar::SqlSession;

use crate::answers::{self, Answer};
use crate::layouts::{LAYOUTS, Layout, Query};
use crate::{count_rows, lsm_quiet, median, timed};

/// The arms, in the order of every `[_; 3]` here.
const ARMS: usize = 3;
const ON: usize = 0;

/// A query's turns (a run in each arm): at least `MIN_RUNS`, then until
/// `BUDGET` is spent or `MAX_RUNS` ran. A whole-table query at full size
/// (0.1 to 0.6 s) gets only the minimum: with five, the medians of its two
/// arms off differed by up to 10 % (bucket cells, 2026-12-05); eleven
/// cost the section a few minutes a layout.
const MIN_RUNS: usize = 11;
const MAX_RUNS: usize = 3000;
const BUDGET: Duration = Duration::from_secs(3);

/// One figure: each arm's median seconds.
struct Figure {
    what: String,
    arms: [f64; ARMS],
}

impl Figure {
    fn new(what: String, times: [Vec<f64>; ARMS]) -> Figure {
        Figure {
            what,
            arms: times.map(median),
        }
    }

    /// On over off: what the counters cost.
    fn cost(&self) -> f64 {
        self.arms[ON] / self.arms[1]
    }

    /// Off over off again: the run's noise.
    fn noise(&self) -> f64 {
        self.arms[1] / self.arms[2]
    }
}

pub struct Counters {
    rounds: usize,
    ingest: Vec<Figure>,
    kept: Vec<Figure>,
    afresh: Vec<Figure>,
}

/// The arm a round runs `k`-th: the order rotates each round.
fn arm(round: usize, k: usize) -> usize {
    (round + k) % ARMS
}

fn count(session: &SqlSession, on: bool) {
    session
        .store()
        .local()
        .expect("embedded store")
        .count_key_activity(on);
}

/// Every chosen layout loaded afresh in each arm (into a table of its own,
/// dropped after, the store left quiet (and a table of no format folded)
/// before the next load), then every
/// query on every chosen layout in each arm, from a kept plan and planned
/// afresh (other literals each run). The tables of `LAYOUTS` are loaded.
pub async fn measure(
    session: &SqlSession,
    variants: &[Vec<Query>],
    chosen: &impl Fn(&&Layout) -> bool,
) -> Counters {
    // A load's time varies by a factor of two with the store's background
    // work (seen: 0.2 to 0.7 s for the same load in one process; at full
    // size the two arms off differed by 7 % with five rounds): seven
    // rounds, each load's time printed as it ends.
    let rounds = if timed() { 7 } else { 1 };
    let mut out = Counters {
        rounds,
        ingest: Vec::new(),
        kept: Vec::new(),
        afresh: Vec::new(),
    };
    for layout in LAYOUTS.iter().filter(chosen) {
        eprintln!("counters on/off: loading {} ...", layout.name);
        out.ingest.push(ingest(session, layout, rounds).await);
    }
    let Some(first) = variants.first() else {
        count(session, true);
        return out;
    };
    for (i, q) in first.iter().enumerate() {
        eprintln!("counters on/off: {} ...", q.name);
        for (j, layout) in LAYOUTS.iter().enumerate().filter(|(_, l)| chosen(l)) {
            let what = format!("{} / {}", q.name, layout.name);
            let kept = [q.cellar[j].as_str()];
            out.kept.push(query(session, &what, &kept, false).await);
            let texts: Vec<&str> = variants.iter().map(|v| v[i].cellar[j].as_str()).collect();
            out.afresh.push(query(session, &what, &texts, true).await);
        }
    }
    count(session, true);
    out
}

/// `layout`'s ingest, timed in each arm `rounds` times, after a load
/// untimed: the first load of a layout is unlike those after it (1.5 to
/// 2 s slower of 15 in a process of its own; 3.5 s faster of 25 in a
/// protobuf run), and the first round begins with the counters on.
async fn ingest(session: &SqlSession, layout: &Layout, rounds: usize) -> Figure {
    let mut times: [Vec<f64>; ARMS] = Default::default();
    let mut loaded: Option<u64> = None;
    // Each load's arm, in order: `None` for the untimed one (counters on).
    let untimed = timed().then_some(None);
    let arms = (0..rounds).flat_map(|round| (0..ARMS).map(move |k| Some(arm(round, k))));
    for (n, which) in untimed.into_iter().chain(arms).enumerate() {
        let table = format!("{}_load{n}", layout.table);
        session
            .query(&layout.create.replace(layout.table, &table))
            .await
            .unwrap();
        count(session, which.is_none_or(|w| w == ON));
        let started = Instant::now();
        session
            .query(&layout.ingest.replace(layout.table, &table))
            .await
            .unwrap();
        session.store().checkpoint().unwrap();
        let seconds = started.elapsed().as_secs_f64();
        if let Some(w) = which {
            times[w].push(seconds);
        }
        if timed() {
            let side = which.map_or("untimed", |w| ["on", "off", "off again"][w]);
            eprintln!("  {table}: {seconds:.3} s ({side})");
        }
        count(session, true);
        if layout.settles && timed() {
            // The background compaction folds the table after its
            // load: not while the next arm loads.
            let local = session.store().local().expect("embedded store");
            let waiting = Instant::now();
            while !local.folded(&table).unwrap() && waiting.elapsed() < Duration::from_secs(600) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let rows = count_rows(session, &table).await;
        assert_eq!(*loaded.get_or_insert(rows), rows, "{table}: rows loaded");
        session.query(&format!("DROP TABLE {table}")).await.unwrap();
        if timed() {
            lsm_quiet(session);
        }
    }
    Figure::new(format!("ingest / {}", layout.name), times)
}

/// `texts` run in turn, each turn in all three arms (their order
/// rotating each turn, so that a slow spell falls on all three alike),
/// each run with a comment of its own when `fresh` (so that no kept plan
/// serves it). In each text's first turn the arms' answers are checked
/// equal (untimed, in the first text's only).
async fn query(session: &SqlSession, what: &str, texts: &[&str], fresh: bool) -> Figure {
    let mut times: [Vec<f64>; ARMS] = Default::default();
    // Untimed (under `cargo test`), one turn checks the arms alike.
    let (min_turns, budget) = if timed() {
        (MIN_RUNS.max(texts.len()), BUDGET)
    } else {
        (1, Duration::ZERO)
    };
    let started = Instant::now();
    let mut turn = 0;
    while turn < min_turns || (turn < MAX_RUNS && started.elapsed() < budget) {
        let text = texts[turn % texts.len()];
        let text = if fresh {
            format!("{text} -- arm run {turn}")
        } else {
            text.to_string()
        };
        let mut answered: Vec<(usize, Answer)> = Vec::new();
        for k in 0..ARMS {
            let which = arm(turn, k);
            count(session, which == ON);
            let t = Instant::now();
            let batches = session.query(&text).await.unwrap();
            times[which].push(t.elapsed().as_secs_f64());
            if turn < texts.len() {
                answered.push((which, answers::from_batches(&batches).unwrap()));
            }
        }
        if let [(_, want), rest @ ..] = &answered[..] {
            for (which, got) in rest {
                if let Some(difference) = answers::difference(want, got) {
                    let side = if *which == ON { "on" } else { "off" };
                    panic!("{what}: the counters {side} answered otherwise: {difference}");
                }
            }
        }
        turn += 1;
    }
    count(session, true);
    Figure::new(what.to_string(), times)
}

impl Counters {
    /// The table of figures and a summary line per kind.
    pub fn print(&self) {
        println!(
            "\n## Key activity counters on vs off (one store; arms on / off / off again in rotating order: loads {} rounds, queries a run of each arm a turn; medians)\n",
            self.rounds
        );
        println!("| what | on | off | on/off | off/off again |");
        println!("|---|---:|---:|---:|---:|");
        for (kind, figures, unit, scale) in [
            ("ingest", &self.ingest, "s", 1.0),
            ("kept plan", &self.kept, "ms", 1e3),
            ("planned afresh", &self.afresh, "ms", 1e3),
        ] {
            for f in figures {
                println!(
                    "| {} ({kind}) | {:.3} {unit} | {:.3} {unit} | {:.3} | {:.3} |",
                    f.what,
                    f.arms[ON] * scale,
                    f.arms[1] * scale,
                    f.cost(),
                    f.noise()
                );
            }
        }
        println!();
        for (kind, figures) in [
            ("ingest", &self.ingest),
            ("queries, kept plan", &self.kept),
            ("queries, planned afresh", &self.afresh),
        ] {
            println!("{}", summary(kind, figures));
        }
    }
}

/// The median and worst on/off of `figures`, beside the same of the
/// noise (as a distance from 1 either way).
fn summary(kind: &str, figures: &[Figure]) -> String {
    let mut line = format!("{kind}: {} figures", figures.len());
    if figures.is_empty() {
        return line;
    }
    let costs: Vec<f64> = figures.iter().map(Figure::cost).collect();
    let worst = figures
        .iter()
        .max_by(|a, b| a.cost().total_cmp(&b.cost()))
        .map_or("", |f| f.what.as_str());
    let noise: Vec<f64> = figures.iter().map(|f| (f.noise() - 1.0).abs()).collect();
    let _ = write!(
        line,
        ", on/off median {:.3}, worst {:.3} ({worst}); noise (|off/off again - 1|) median {:.3}, worst {:.3}",
        median(costs.clone()),
        costs.iter().copied().fold(f64::MIN, f64::max),
        median(noise.clone()),
        noise.iter().copied().fold(f64::MIN, f64::max),
    );
    line
}
