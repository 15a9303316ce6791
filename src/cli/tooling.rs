//! `herald bench`, `herald bench-stream` and `herald demo`: the commands
//! that run the tooling (`crate::tooling`, outside the service's path) rather
//! than the service. A build without the `tooling` feature has none of them,
//! and `herald` names the feature when one is asked for.

use super::Config;
use clap::Args;

/// `herald bench`: the drain, pipeline and several-instance benchmarks.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Rows to enqueue and drain
    #[arg(long, default_value_t = 10_000)]
    pub rows: usize,
    /// Rows claimed per sweep
    #[arg(long, default_value_t = 100)]
    pub batch: u32,
    /// Concurrent deliveries
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Use this (scratch!) database instead of a temporary SQLite file
    #[arg(long = "bench-database-url", value_name = "URL")]
    pub database_url: Option<String>,
    /// The channel to drain through: inbox, email (needs --smtp-url), push
    /// (to a local push service that verifies and decrypts, one device per
    /// user), sms or slack (to an in-process double of Twilio's or Slack's
    /// API)
    #[arg(long, default_value = "inbox")]
    pub channel: String,
    /// With --channel email: the SMTP server (or file:///DIR) to send to.
    /// Every message goes to it: point it at a local sink, never a real relay.
    #[arg(long, value_name = "URL", required_if_eq("channel", "email"))]
    pub smtp_url: Option<String>,
    /// With --channel email: one SMTP connection per message instead of a pool
    #[arg(long)]
    pub no_pool: bool,
    /// With --channel push: HTTP/1.1 to the push service instead of HTTP/2
    /// (which real push services negotiate over TLS)
    #[arg(long)]
    pub http1: bool,
    /// Drain with N `herald serve` processes (this binary) sharing the
    /// database, and report latency too, instead of one worker in this
    /// process (--channel inbox or sms)
    #[arg(long, value_name = "N", conflicts_with_all = ["smtp_url", "no_pool"])]
    pub instances: Option<usize>,
    /// Measure the whole path instead of the drain: the service in this
    /// process, POST /v1/triggers from --connections clients for --duration
    /// seconds, an inbox rule with a condition and a German variant
    #[arg(long, conflicts_with_all = ["smtp_url", "no_pool", "instances"])]
    pub pipeline: bool,
    /// With --pipeline: seconds of load
    #[arg(long, value_name = "SECS", default_value_t = 15, requires = "pipeline")]
    pub duration: u64,
    /// With --pipeline: concurrent HTTP connections sending triggers, each
    /// waiting for its answer before the next (so N connections at a
    /// latency L send at most N / L a second: 16 at 7 ms, 2,300)
    #[arg(long, value_name = "N", default_value_t = crate::tooling::bench_pipeline::DEFAULT_CONNECTIONS, requires = "pipeline")]
    pub connections: usize,
    /// With --pipeline: the rule with a send window (open), a frequency cap
    /// (not reached), escalation (follow-ups due after the run) and
    /// recipients with time zones and quiet hours (not on)
    #[arg(long, requires = "pipeline")]
    pub workflows: bool,
    /// With --instances and --channel sms: `sms.rate` for every instance
    /// (texts per second, shared); the provider's double reports the rate
    /// it saw
    #[arg(long, value_name = "PER_SECOND", requires = "instances")]
    pub sms_rate: Option<f64>,
    /// Measure one trigger to a topic of --subscribers users instead of the
    /// drain: subscribing through the API, the trigger's answer, planning,
    /// the first and last delivered message, peak memory
    #[arg(long, conflicts_with_all = ["smtp_url", "no_pool", "instances", "pipeline"])]
    pub fanout: bool,
    /// With --fanout: the topic's subscribers
    #[arg(long, value_name = "N", default_value_t = 100_000, requires = "fanout")]
    pub subscribers: usize,
    /// With --fanout: also send this many single-recipient triggers through
    /// the API (the host's loop, today's alternative) and report their rate
    #[arg(long, value_name = "M", default_value_t = 0, requires = "fanout")]
    pub loop_triggers: usize,
    /// With --fanout: recipients per planning chunk
    /// (`planner.fan_out_chunk`, 100 to 100000)
    #[arg(long, value_name = "N", default_value_t = crate::planning::fan_out::CHUNK, requires = "fanout",
          value_parser = clap::value_parser!(u32).range(100..=100_000))]
    pub chunk: u32,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

/// `herald bench-stream`.
#[derive(Debug, Args)]
pub struct BenchStreamArgs {
    /// Concurrent stream connections, one user each
    #[arg(long, default_value_t = 1000)]
    pub connections: usize,
    /// Messages per connection
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

pub(super) async fn bench(args: &BenchArgs) -> anyhow::Result<()> {
    if let Some(instances) = args.instances {
        return bench_instances(args, instances).await;
    }
    if args.pipeline {
        return bench_pipeline(args).await;
    }
    if args.fanout {
        return bench_fanout(args).await;
    }
    let opts = crate::tooling::bench::BenchOptions {
        rows: args.rows,
        database_url: args.database_url.clone(),
        batch: args.batch,
        concurrency: args.concurrency,
        channel: args.channel.clone(),
        smtp_url: args.smtp_url.clone(),
        pool: !args.no_pool,
        http2: !args.http1,
    };
    let report = crate::tooling::bench::run(&opts).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let setup = format!("channel {}", report.channel);
        print_header(report.rows, &report.database, report.cores, &setup, report.batch, report.concurrency);
        if let Some(t) = &report.transport {
            println!("  transport: {t}");
        }
        println!("  enqueue: {:>10.0} rows/s ({:.2}s)", report.enqueue_rows_per_sec, report.enqueue_seconds);
        println!(
            "  drain:   {:>10.0} rows/s ({:.2}s, {} claimed, {} sent)",
            report.drain_rows_per_sec, report.drain_seconds, report.claimed, report.sent
        );
        if let Some(p) = &report.push {
            println!(
                "  push:    {} verified and decrypted by the receiver, {} refused; {:.0} µs to encrypt and sign one \
                 (VAPID token cached), {:.0} µs a fresh VAPID signature",
                p.received, p.refused, p.encrypt_and_sign_us, p.vapid_sign_us
            );
            if let Some(cpu) = p.process_cpu_us_per_notification {
                println!("  cpu:     {cpu:.0} µs of CPU per notification (Herald and the receiver, this process)");
            }
        }
        if let (Some(c), Some(per_row)) = (report.pg_commits, report.pg_commits_per_row) {
            println!("  commits: {c} PostgreSQL transactions during the drain, {per_row:.3} per row");
        }
    }
    Ok(())
}

async fn bench_fanout(args: &BenchArgs) -> anyhow::Result<()> {
    let opts = crate::tooling::bench_fanout::FanOutOptions {
        subscribers: args.subscribers,
        database_url: args.database_url.clone(),
        batch: args.batch,
        concurrency: args.concurrency,
        loop_triggers: args.loop_triggers,
        chunk: args.chunk,
    };
    let r = crate::tooling::bench_fanout::run(&opts).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    println!(
        "herald bench --fanout: {} ({} cores), a topic of {} subscribers, one inbox rule",
        r.database, r.cores, r.subscribers
    );
    println!(
        "  subscribe:  {:.2}s through the API ({:.0} subscribers/s)",
        r.subscribe_seconds,
        r.subscribers as f64 / r.subscribe_seconds
    );
    println!("  trigger:    answered in {:.1} ms", r.trigger_answer_ms);
    println!("  planning:   {:.2}s, {:.0} rows/s (chunks of {})", r.planning_seconds, r.planning_rows_per_sec, r.chunk);
    println!(
        "  delivered:  first {:.2}s, last {:.2}s after the trigger; {} messages, {:.0}/s end to end",
        r.first_delivered_seconds, r.last_delivered_seconds, r.delivered, r.delivered_per_sec
    );
    println!("  memory:     peak RSS {:.0} MiB during the fan-out", r.peak_rss_mib);
    if let Some(rate) = r.loop_triggers_per_sec {
        println!(
            "  the loop:   {} single triggers through the API at {rate:.0}/s: {} would take {:.0}s to hand over",
            r.loop_triggers,
            r.subscribers,
            r.subscribers as f64 / rate
        );
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

/// The first line of a drain's text report: what was measured, on what.
fn print_header(
    rows: impl std::fmt::Display,
    database: &str,
    cores: usize,
    setup: &str,
    batch: impl std::fmt::Display,
    concurrency: impl std::fmt::Display,
) {
    println!(
        "herald bench: {rows} rows, {database} ({cores} cores), {setup}, batch {batch}, concurrency {concurrency}"
    );
}

async fn bench_instances(args: &BenchArgs, instances: usize) -> anyhow::Result<()> {
    if !["inbox", "sms"].contains(&args.channel.as_str()) {
        anyhow::bail!("--instances: --channel {:?} is not accepted; expected inbox or sms", args.channel);
    }
    if args.sms_rate.is_some() && args.channel != "sms" {
        anyhow::bail!("--sms-rate: only with --channel sms");
    }
    let opts = crate::tooling::bench_instances::InstancesOptions {
        rows: args.rows,
        instances,
        database_url: args.database_url.clone(),
        batch: args.batch,
        concurrency: args.concurrency,
        binary: None,
        timeout: std::time::Duration::from_secs(1800),
        channel: args.channel.clone(),
        sms_rate: args.sms_rate,
    };
    let r = crate::tooling::bench_instances::run(&opts).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        let setup = match args.sms_rate {
            Some(rate) => format!("{} instance(s), channel sms, sms.rate {rate}/s", r.instances),
            None => format!("{} instance(s), channel {}", r.instances, args.channel),
        };
        print_header(r.rows, &r.database, r.cores, &setup, r.batch, r.concurrency);
        println!(
            "  drain:   {:>10.0} rows/s ({:.2}s, {} sent, {} not sent)",
            r.drain_rows_per_sec, r.drain_seconds, r.sent, r.not_sent
        );
        println!(
            "  latency: p50 {} ms, p99 {} ms, max {} ms (outcome commit minus due time)",
            r.latency_p50_ms, r.latency_p99_ms, r.latency_max_ms
        );
        if let Some(p) = &r.provider {
            println!(
                "  provider: {} texts at {:.1}/s from the first to the last, at most {} in any one second",
                p.requests, p.per_second, p.max_in_any_second
            );
        }
    }
    Ok(())
}

pub(super) async fn bench_stream(args: &BenchStreamArgs) -> anyhow::Result<()> {
    let opts = crate::tooling::bench_stream::StreamBenchOptions { connections: args.connections, rounds: args.rounds };
    let r = crate::tooling::bench_stream::run(&opts).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!("herald bench-stream: {} connections, {} messages, {} cores", r.connections, r.messages, r.cores);
        println!("  {:.0} messages/s through the stream ({:.2}s)", r.messages_per_sec, r.seconds);
        println!(
            "  server memory: {} KiB before, {} KiB with the streams open: {:.1} KiB per connection",
            r.server_rss_before_kib, r.server_rss_connected_kib, r.server_kib_per_connection
        );
    }
    Ok(())
}

/// `herald demo`: one trigger through rules, planner and worker on the
/// configured database, printed step by step.
pub(super) async fn demo(config: &Config) -> anyhow::Result<()> {
    if let Some(t) = config.email.transport.as_deref().filter(|t| t.starts_with("file:")) {
        eprintln!(
            "NOTE: email.transport is {t}: email is written to files there and NOTHING LEAVES THIS MACHINE \
             (the demo itself delivers in-app messages only)"
        );
    }
    let store = super::ready_store(config).await?;
    crate::tooling::demo::run(&store, &mut std::io::stdout().lock()).await
}
