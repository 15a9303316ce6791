//! The row's outcome from its devices' outcomes, and what is done to each
//! device, against an in-memory device store. The transports themselves
//! are tested against real counterparts in `tests/push_web.rs` and
//! `tests/push_providers.rs`, the channel end to end in `tests/push_channel.rs`.

use std::sync::Mutex;

use super::*;
use crate::clock::{ManualClock, Millis};
use crate::store::{NewPushDevice, OutboxRow, Registered, StoreError};

#[derive(Default)]
struct Devices {
    live: Mutex<Vec<PushDeviceRow>>,
    removed: Mutex<Vec<(String, String, String)>>,
    succeeded: Mutex<Vec<(Vec<String>, Millis)>>,
    per_user_reads: std::sync::atomic::AtomicUsize,
}

#[async_trait]
impl PushDeviceStore for Devices {
    async fn register_push_device(&self, _: &str, _: &NewPushDevice, _: Millis) -> Result<Registered, StoreError> {
        unreachable!("the channel never registers")
    }
    async fn push_devices(&self, user_id: &str, _: bool) -> Result<Vec<PushDeviceRow>, StoreError> {
        self.per_user_reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(self.live.lock().unwrap().iter().filter(|d| d.user_id == user_id).cloned().collect())
    }
    async fn live_push_devices_of(&self, users: &[&str]) -> Result<Vec<PushDeviceRow>, StoreError> {
        Ok(self.live.lock().unwrap().iter().filter(|d| users.contains(&d.user_id.as_str())).cloned().collect())
    }
    async fn remove_push_device(
        &self,
        _: &str,
        id: &str,
        by: &str,
        reason: &str,
        _: Millis,
    ) -> Result<bool, StoreError> {
        self.removed.lock().unwrap().push((id.into(), by.into(), reason.into()));
        Ok(true)
    }
    async fn mark_push_success(&self, ids: &[String], now: Millis) -> Result<(), StoreError> {
        self.succeeded.lock().unwrap().push((ids.to_vec(), now));
        Ok(())
    }
}

fn device(id: &str, kind: &str, label: Option<&str>) -> PushDeviceRow {
    PushDeviceRow {
        id: id.into(),
        user_id: "u".into(),
        kind: kind.into(),
        address: "fcm-token".into(),
        p256dh: None,
        auth: None,
        label: label.map(Into::into),
        created_at: Millis(0),
        last_success_at: None,
        removed_at: None,
        removed_by: None,
        removed_reason: None,
    }
}

fn channel(devices: Arc<Devices>, health: ChannelHealth) -> PushChannel {
    PushChannel::new(PushParts {
        devices,
        transports: Transports::default(),
        policy: EndpointPolicy::default(),
        health,
        clock: Arc::new(ManualClock::at(Millis(5_000))),
    })
}

fn accepted() -> DeviceOutcome {
    DeviceOutcome::Accepted { message_id: Some("m-1".into()) }
}

fn gone() -> DeviceOutcome {
    DeviceOutcome::DeviceGone { reason: "FCM answered 404: UNREGISTERED".into() }
}

#[tokio::test]
async fn one_accepting_device_makes_the_row_sent_and_the_others_are_named() {
    let store = Arc::new(Devices::default());
    let ch = channel(store.clone(), ChannelHealth::default());
    let devices = [device("d-aaaaaa1", "web", Some("Ada's Pixel")), device("d-bbbbbb2", "fcm", None)];
    let outcome = ch.settle(&devices, &[accepted(), gone()], "u").await;
    let Outcome::Sent { transport, detail: Some(detail), .. } = outcome else { panic!("{outcome:?}") };
    assert_eq!(transport, "push");
    assert_eq!(
        detail,
        "1 of 2 devices accepted: web (Ada's Pixel): accepted (id m-1); fcm …bbbbb2: removed, FCM answered 404: \
         UNREGISTERED"
    );
    // The gone device is removed, by the provider, with its words.
    assert_eq!(
        store.removed.lock().unwrap().as_slice(),
        [("d-bbbbbb2".to_owned(), "provider".to_owned(), "FCM answered 404: UNREGISTERED".to_owned())]
    );
    // The last success waits for the batch, then is written at the clock's time.
    assert!(store.succeeded.lock().unwrap().is_empty());
    ch.flush().await;
    assert_eq!(store.succeeded.lock().unwrap().as_slice(), [(vec!["d-aaaaaa1".to_owned()], Millis(5_000))]);
}

#[tokio::test]
async fn with_none_accepted_a_passing_failure_retries_after_the_longest_hint() {
    let ch = channel(Arc::new(Devices::default()), ChannelHealth::default());
    let devices = [device("a", "web", None), device("b", "fcm", None), device("c", "apns", None)];
    let outcomes = [
        DeviceOutcome::Retry { after: Some(Duration::from_secs(1)), reason: "429".into() },
        DeviceOutcome::Retry { after: Some(Duration::from_secs(30)), reason: "503".into() },
        gone(),
    ];
    let outcome = ch.settle(&devices, &outcomes, "u").await;
    let Outcome::Retry { after, detail, .. } = outcome else { panic!("{outcome:?}") };
    assert_eq!(after, Some(Duration::from_secs(30)));
    assert!(detail.contains("web …a: to retry, 429"), "{detail}");
}

#[tokio::test]
async fn every_device_gone_is_a_bounce_and_a_refused_credential_reaches_readyz() {
    let health = ChannelHealth::default();
    let ch = channel(Arc::new(Devices::default()), health.clone());
    let outcome = ch.settle(&[device("a", "fcm", None)], &[gone()], "u").await;
    let Outcome::Bounced { detail, .. } = outcome else { panic!("{outcome:?}") };
    assert!(detail.starts_with("every device of this user is gone: fcm …a: removed"), "{detail}");

    let refused = DeviceOutcome::CredentialRejected { reason: "APNs answered 403: InvalidProviderToken".into() };
    let outcome = ch.settle(&[device("b", "apns", None)], &[refused], "u").await;
    let Outcome::Terminal { detail, .. } = outcome else { panic!("{outcome:?}") };
    assert!(detail.contains("the credential was refused: APNs answered 403: InvalidProviderToken"), "{detail}");
    assert_eq!(health.problems(), vec![("push: APNs".into(), "APNs answered 403: InvalidProviderToken".into())]);
    // A later acceptance through the same provider clears it.
    ch.settle(&[device("b", "apns", None)], &[accepted()], "u").await;
    assert!(health.problems().is_empty());
}

#[tokio::test]
async fn a_user_without_a_device_is_suppressed_and_nothing_is_sent() {
    let ch = channel(Arc::new(Devices::default()), ChannelHealth::default());
    let row = crate::store::claimed_row("r", "t", 1);
    let payload = serde_json::json!({"title": "Export ready"}).to_string();
    let outcome = ch.deliver(&Delivery::bare(OutboxRow { payload, ..row })).await;
    assert_eq!(outcome, Outcome::Suppressed { detail: NO_DEVICE.into(), address_hash: None });
}

#[test]
fn a_rules_ttl_and_urgency_reach_the_notification_with_the_grace_window_as_default() {
    let template = serde_json::from_value(serde_json::json!(
        {"fallback_locale": "en", "locales": {"en": {"title": "Export ready"}}}
    ))
    .unwrap();
    let input = crate::planning::rule::RuleInput::new("r".into(), "t".into(), "push".into(), template, "c".into());
    let mut rule = input.into_row(Millis(0), &Default::default()).unwrap();
    rule.grace_seconds = Some(3600);
    let rendered = crate::planning::template::Rendered {
        locale: "en".into(),
        subject: "Export ready".into(),
        text: String::new(),
        html: None,
        url: Some("https://app.example/exports/7".into()),
        blocks: None,
    };
    let row = OutboxRow { payload: r#"{"export": 7}"#.into(), ..crate::store::claimed_row("r-1", "t", 1) };
    let delivery = Delivery { row, rule: Some(Arc::new(rule.clone())), recipient: None, message: Some(rendered) };
    let n = notification(&delivery).unwrap();
    assert_eq!((n.ttl, n.urgency), (Duration::from_secs(3600), super::super::Urgency::Normal));
    assert_eq!(n.body, None, "an empty body is left out");
    let json: serde_json::Value = serde_json::from_slice(&n.payload().unwrap()).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"id": "r-1", "title": "Export ready", "url": "https://app.example/exports/7", "data": {"export": 7}})
    );

    rule.workflow = Some(serde_json::json!({"push": {"ttl": 60, "urgency": "high"}}));
    let delivery = Delivery { rule: Some(Arc::new(rule)), ..delivery };
    let n = notification(&delivery).unwrap();
    assert_eq!((n.ttl, n.urgency), (Duration::from_secs(60), super::super::Urgency::High));
}

#[test]
fn a_hand_enqueued_row_needs_a_title() {
    let row = OutboxRow { payload: r#"{"body": "no title"}"#.into(), ..crate::store::claimed_row("r", "t", 1) };
    let err = notification(&Delivery::bare(row)).unwrap_err();
    assert!(err.contains("missing field `title`"), "{err}");
}

#[tokio::test]
async fn a_prefetched_batch_reads_no_devices_row_by_row() {
    let store = Arc::new(Devices::default());
    let ch = channel(store.clone(), ChannelHealth::default());
    let payload = serde_json::json!({"title": "t"}).to_string();
    let row = |user: &str| OutboxRow {
        user_id: user.into(),
        payload: payload.clone(),
        ..crate::store::claimed_row("r", "t", 1)
    };
    let (a, b) = (row("a"), row("b"));
    ch.prefetch(&[&a, &b]).await;
    // Neither has a device: each answer comes from the batch's read.
    for r in [a, b] {
        assert!(matches!(ch.deliver(&Delivery::bare(r)).await, Outcome::Suppressed { .. }));
    }
    assert_eq!(store.per_user_reads.load(std::sync::atomic::Ordering::SeqCst), 0);
    // A row outside a batch reads its own.
    ch.deliver(&Delivery::bare(row("c"))).await;
    assert_eq!(store.per_user_reads.load(std::sync::atomic::Ordering::SeqCst), 1);
}
