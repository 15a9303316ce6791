//! `herald demo`: one trip through the whole path on the configured database
//! (the embedded SQLite file by default), printed as it happens. It uses the
//! same planner, worker and store as `serve`, in-process, so what it shows is
//! what a deployment does.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use crate::delivery::worker::{Worker, WorkerConfig, WorkerParts};
use crate::domain::UserId;
use crate::metrics::Metrics;
use crate::planning::planner::Planner;
use crate::planning::recipient::{Preferences, RecipientInput};
use crate::planning::rule::RuleInput;
use crate::planning::template::{LocaleTemplate, TemplateSet};
use crate::store::{NewTrigger, SqlStore, Store, TriggerInsert, new_id};

const RULE_NAME: &str = "Demo: export ready";
const TRIGGER: &str = "demo.export_ready";

pub async fn run(store: &SqlStore, out: &mut impl Write) -> anyhow::Result<()> {
    let store: Arc<dyn Store> = Arc::new(store.clone());
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let now = clock.now();
    writeln!(out, "Herald demo on {} — the same planner, worker and send log as `herald serve`.\n", store.dialect())?;

    // 1. A recipient who reads German and opted out of nothing.
    let user = UserId::parse("user_id", "demo-user")?;
    let recipient = RecipientInput {
        email: Some("demo-user@example.com".into()),
        name: Some("Ada".into()),
        locale: Some("de".into()),
        timezone: Some("Europe/Berlin".into()),
        preferences: Preferences::default(),
        quiet_hours: None,
        ..Default::default()
    }
    .into_row(&user, now)
    .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    store.put_recipient(&recipient).await?;
    writeln!(out, "1. recipient {user}: locale de, email {}", recipient.email.as_deref().unwrap_or("-"))?;

    // 2. A rule, enabled (rules start disabled: an operator turns them on).
    let rule = match store.list_rules().await?.into_iter().find(|r| r.name == RULE_NAME) {
        Some(r) => r,
        None => {
            let mut locales = std::collections::BTreeMap::new();
            locales.insert(
                "en".into(),
                LocaleTemplate {
                    subject: "Your export {{ payload.name }} is ready".into(),
                    text: "Hello {{ user.name }}, {{ payload.rows }} rows are waiting for you.".into(),
                    html: None,
                    ..Default::default()
                },
            );
            locales.insert(
                "de".into(),
                LocaleTemplate {
                    subject: "Dein Export {{ payload.name }} ist fertig".into(),
                    text: "Hallo {{ user.name }}, {{ payload.rows }} Zeilen warten auf dich.".into(),
                    html: None,
                    ..Default::default()
                },
            );
            let template = TemplateSet { fallback_locale: "en".into(), locales };
            let input = RuleInput {
                condition: Some("payload.rows > 0".into()),
                grace: Some(3600),
                enabled: true,
                ..RuleInput::new(RULE_NAME.into(), TRIGGER.into(), "inbox".into(), template, "exports".into())
            };
            let row = input.into_row(now, &Default::default()).map_err(|e| anyhow::anyhow!("{e:?}"))?;
            store.insert_rule(&row).await?;
            row
        }
    };
    writeln!(
        out,
        "2. rule \"{}\" ({}): {} → {}, condition `{}`, enabled {}",
        rule.name,
        rule.id,
        rule.trigger_type,
        rule.channel,
        rule.condition.as_deref().unwrap_or("-"),
        rule.enabled
    )?;

    // 3. Three triggers: one the rule plans, one its condition refuses, one
    //    no rule answers.
    let planner = Planner::new(store.clone(), clock.clone(), Duration::from_secs(1), 100);
    let fires = [
        (TRIGGER, serde_json::json!({ "name": "invoices-2026", "rows": 1200 })),
        (TRIGGER, serde_json::json!({ "name": "empty-report", "rows": 0 })),
        ("demo.unconfigured", serde_json::json!({})),
    ];
    writeln!(out, "3. triggers:")?;
    for (kind, payload) in fires {
        let trigger = NewTrigger {
            id: new_id(),
            trigger_type: kind.into(),
            user_id: user.clone(),
            payload: payload.clone(),
            idempotency_key: None,
            request_hash: None,
            occurred_at: clock.now(),
            send_at: None,
            actor_id: None,
        };
        let TriggerInsert::Created = store.insert_trigger(&trigger, clock.now()).await? else { continue };
        let row = store.get_trigger(&trigger.id).await?.expect("just inserted");
        let planned = planner.plan(&row).await?;
        let detail = store.get_trigger(&trigger.id).await?.and_then(|t| t.plan_detail).unwrap_or_default();
        writeln!(out, "   {kind} {payload} → {} message(s): {detail}", planned.as_ref().map_or(0, |p| p.rows.len()))?;
    }

    // 4. The worker delivers what is due.
    let worker = Worker::new(WorkerParts {
        store: store.clone(),
        registry: crate::app::registry(),
        clock: clock.clone(),
        config: WorkerConfig::default(),
        metrics: Metrics::new(),
        address_keys: None,
        lease: None,
    });
    let report = worker.tick().await?;
    writeln!(out, "4. worker sweep: claimed {}, sent {}, failed {}", report.claimed, report.sent, report.failed)?;

    // 5. The answer to "did demo-user get it?"
    writeln!(out, "5. send log for {user}, newest first:")?;
    for s in store.sends_for_user(&user, 5).await? {
        writeln!(out, "   {}  {:<9} {}  {}", s.created_at, s.status, s.channel, s.detail.as_deref().unwrap_or(""))?;
    }
    writeln!(out, "   inbox:")?;
    for m in store.inbox_for_user(&user, 3).await? {
        writeln!(out, "   \"{}\" — {}", m.title, m.body.as_deref().unwrap_or(""))?;
    }
    writeln!(
        out,
        "\nNext: `herald serve`, then `herald keys create --name me` and the HTTP API (README), or `herald sends --user-id {user}`."
    )?;
    Ok(())
}
