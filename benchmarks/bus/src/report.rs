//! The table: messages per second, and each one's ratio to the best Postgres queue in its column.

use crate::{Col, Figure, Kind, Row, Settings};

fn rate(row: &Row, col: Col) -> Option<f64> {
    row.figures.iter().find_map(|(c, f)| match f {
        Figure::Rate(v) | Figure::Capped(v) if *c == col => Some(*v),
        _ => None,
    })
}

fn thousands(v: f64) -> String {
    let n = v.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn header(s: &Settings, col: Col) -> String {
    match col {
        Col::Sends => format!(
            "(a) sends/s, batches of {}, {} senders",
            s.send_batch, s.senders
        ),
        Col::Recv10 => format!("(b) recv+ack/s, {} waiting, batches of 10", s.waiting),
        Col::Recv100 => format!("(b) recv+ack/s, {} waiting, batches of 100", s.waiting),
        Col::Backlog1k => "(c) recv+ack/s, 1k waiting".into(),
        Col::Backlog100k => "(c) 100k waiting".into(),
        Col::Backlog1m => "(c) 1M waiting".into(),
    }
}

pub fn print(s: &Settings, server: &str, rows: &[Row]) {
    // The best *queue* on Postgres per column: the plain-SQL baseline is a ceiling, not a queue.
    let best = |col: Col| {
        rows.iter()
            .filter(|r| {
                !matches!(r.kind, Kind::Baseline | Kind::OursAckIn)
                    && !r.kind.is_sqlite()
                    && !r.kind.is_rabbitmq()
            })
            .filter_map(|r| rate(r, col))
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
    };
    println!();
    println!("Server: {server}. Fresh database per measurement; ANALYZE after each load.");
    println!(
        "Receivers: {} at once (SQLite: {} processes); (c): {} messages received and acknowledged \
         on top of the backlog, batches of {} (1 where the queue has no batches).",
        s.receivers, s.sqlite_processes, s.backlog_receive, s.backlog_batch
    );
    println!(
        "(a) and (b): median of {} runs, each on a fresh database.",
        s.repeat
    );
    println!("load avg: the machine's 1-minute load average after each figure of the row (2 cores; other work slows every figure).");
    println!("Each cell: messages/s (ratio to the best Postgres queue in the column, baseline excluded).");
    println!();
    let mut head = vec!["queue".to_string()];
    head.extend(Col::ALL.iter().map(|c| header(s, *c)));
    head.push("flatness (largest backlog / 1k)".into());
    head.push("load avg".into());
    println!("| {} |", head.join(" | "));
    println!("|{}", " --- |".repeat(head.len()));
    for r in rows {
        let mut cells = vec![r.kind.label().to_string()];
        for col in Col::ALL {
            let f = r.figures.iter().find(|(c, _)| *c == col).map(|(_, f)| f);
            cells.push(match f {
                Some(Figure::Rate(v)) => match best(col) {
                    Some(b) if b > 0.0 => format!("{} ({:.2})", thousands(*v), v / b),
                    _ => thousands(*v),
                },
                Some(Figure::Capped(v)) => match best(col) {
                    Some(b) if b > 0.0 => format!("{} ({:.2})†", thousands(*v), v / b),
                    _ => format!("{}†", thousands(*v)),
                },
                Some(Figure::NotSupported(why)) => format!("n/a: {why}"),
                Some(Figure::Skipped(why)) => format!("skipped: {why}"),
                Some(Figure::Failed(e)) => {
                    let e: String = e.chars().take(120).collect();
                    format!("failed: {}", e.replace('|', "/").replace('\n', " "))
                }
                None => "-".into(),
            });
        }
        let low = rate(r, Col::Backlog1k);
        let high = rate(r, Col::Backlog1m).or_else(|| rate(r, Col::Backlog100k));
        cells.push(match (low, high) {
            (Some(l), Some(h)) if l > 0.0 => format!("{:.2}", h / l),
            _ => "-".into(),
        });
        let (lo, hi) = r
            .loads
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
        cells.push(if r.loads.is_empty() {
            "-".into()
        } else {
            format!("{lo:.1}–{hi:.1}")
        });
        println!("| {} |", cells.join(" | "));
    }
    println!();
    println!(
        "† stopped after {} s before all were acknowledged: the rate until then.",
        s.max_seconds
    );
    println!();
    for r in rows
        .iter()
        .filter(|r| matches!(r.kind, Kind::Ours | Kind::OursSqlite))
    {
        let check = |ok: bool| if ok { "met" } else { "NOT met" };
        // The better of the two receive columns.
        let receive = rate(r, Col::Recv10)
            .into_iter()
            .chain(rate(r, Col::Recv100))
            .reduce(f64::max);
        if r.kind == Kind::Ours {
            if let Some(v) = receive {
                println!(
                    "target Postgres recv+ack ≥ 10,000/s with {} waiting: {} ({})",
                    s.waiting,
                    check(v >= 10_000.0),
                    thousands(v)
                );
            }
            if let Some(v) = rate(r, Col::Sends) {
                println!(
                    "target Postgres batched sends ≥ 60,000/s: {} ({})",
                    check(v >= 60_000.0),
                    thousands(v)
                );
            }
        } else if let Some(v) = receive {
            println!(
                "target SQLite recv+ack ≥ 5,000/s, {} processes: {} ({})",
                s.sqlite_processes,
                check(v >= 5_000.0),
                thousands(v)
            );
        }
    }
}
