//! `herald bench`: the drain, pipeline and several-instance benchmarks
//! (the code they run is in `crate::tooling`, outside the service's path).

use super::BenchArgs;

pub(super) async fn bench(args: &BenchArgs) -> anyhow::Result<()> {
    if let Some(instances) = args.instances {
        return bench_instances(args, instances).await;
    }
    if args.pipeline {
        return bench_pipeline(args).await;
    }
    let opts = crate::tooling::bench::BenchOptions {
        rows: args.rows,
        database_url: args.database_url.clone(),
        batch: args.batch,
        concurrency: args.concurrency,
        channel: args.channel.clone(),
        smtp_url: args.smtp_url.clone(),
        pool: !args.no_pool,
    };
    let report = crate::tooling::bench::run(&opts).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "herald bench: {} rows, {} ({} cores), channel {}, batch {}, concurrency {}",
            report.rows, report.database, report.cores, report.channel, report.batch, report.concurrency
        );
        if let Some(t) = &report.transport {
            println!("  transport: {t}");
        }
        println!("  enqueue: {:>10.0} rows/s ({:.2}s)", report.enqueue_rows_per_sec, report.enqueue_seconds);
        println!(
            "  drain:   {:>10.0} rows/s ({:.2}s, {} claimed, {} sent)",
            report.drain_rows_per_sec, report.drain_seconds, report.claimed, report.sent
        );
        if let (Some(c), Some(per_row)) = (report.pg_commits, report.pg_commits_per_row) {
            println!("  commits: {c} PostgreSQL transactions during the drain, {per_row:.3} per row");
        }
    }
    Ok(())
}

async fn bench_pipeline(args: &BenchArgs) -> anyhow::Result<()> {
    let opts = crate::tooling::bench_pipeline::PipelineOptions {
        duration: std::time::Duration::from_secs(args.duration),
        connections: args.connections,
        database_url: args.database_url.clone(),
        workflows: args.workflows,
        ..Default::default()
    };
    let r = crate::tooling::bench_pipeline::run(&opts).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    println!(
        "herald bench --pipeline{}: {} ({} cores), {} connections, {:.1}s of load",
        if r.workflows { " --workflows" } else { "" },
        r.database,
        r.cores,
        r.connections,
        r.duration_seconds
    );
    println!(
        "  accepted:  {:>8.0} triggers/s ({} triggers, {} errors), API p50 {:.1} ms, p99 {:.1} ms",
        r.triggers_per_sec, r.triggers_accepted, r.errors, r.api_latency_ms.p50, r.api_latency_ms.p99
    );
    println!(
        "  delivered: {:>8.0} messages/s while the load ran; backlog at the end {}, drained {:.1}s later",
        r.delivered_per_sec, r.backlog_at_end, r.drain_after_load_seconds
    );
    let column = |f: fn(&crate::tooling::bench_pipeline::LoadSecond) -> String| {
        r.per_second.iter().map(f).collect::<Vec<_>>().join(" ")
    };
    println!("  per second: accepted {}", column(|s| s.accepted.to_string()));
    println!("              delivered {}", column(|s| s.delivered.to_string()));
    println!("              RSS MiB {}", column(|s| format!("{:.0}", s.rss_mib)));
    println!(
        "  trigger to delivery: p50 {:.0} ms, p99 {:.0} ms; one trigger into an idle service: p50 {:.0} ms, max {:.0} ms",
        r.trigger_to_delivery_ms.p50,
        r.trigger_to_delivery_ms.p99,
        r.idle_trigger_to_delivery_ms.p50,
        r.idle_trigger_to_delivery_ms.max
    );
    println!(
        "  memory: RSS {:.0} MiB before the load, {:.0} MiB after, peak {:.0} MiB",
        r.rss_start_mib, r.rss_end_mib, r.peak_rss_mib
    );
    if let Some(c) = r.pg_commits_per_message {
        println!("  commits: {c:.3} PostgreSQL transactions per message");
    }
    Ok(())
}

async fn bench_instances(args: &BenchArgs, instances: usize) -> anyhow::Result<()> {
    if args.channel != "inbox" {
        anyhow::bail!("--instances: only --channel inbox is measured with several instances");
    }
    let opts = crate::tooling::bench_instances::InstancesOptions {
        rows: args.rows,
        instances,
        database_url: args.database_url.clone(),
        batch: args.batch,
        concurrency: args.concurrency,
        binary: None,
        timeout: std::time::Duration::from_secs(1800),
    };
    let r = crate::tooling::bench_instances::run(&opts).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "herald bench: {} rows, {} ({} cores), {} instance(s), batch {}, concurrency {}",
            r.rows, r.database, r.cores, r.instances, r.batch, r.concurrency
        );
        println!(
            "  drain:   {:>10.0} rows/s ({:.2}s, {} sent, {} not sent)",
            r.drain_rows_per_sec, r.drain_seconds, r.sent, r.not_sent
        );
        println!(
            "  latency: p50 {} ms, p99 {} ms, max {} ms (outcome commit minus due time)",
            r.latency_p50_ms, r.latency_p99_ms, r.latency_max_ms
        );
    }
    Ok(())
}
