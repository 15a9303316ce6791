//! The push device store (`store::push_devices`) on SQLite, PostgreSQL and
//! MariaDB: a device is found by its endpoint or token whoever registers
//! it, moves to the last user who did, is removed with who and why (and an
//! audit row in the same transaction), comes back when registered again,
//! and goes with its user.

mod common;

use std::sync::Arc;

use common::{T0, TestDb, user};
use herald::clock::Millis;
use herald::store::{NewPushDevice, OperatorStore, PushDeviceStore, RecipientStore, Registered};

backend_tests!(
    a_device_is_created_once_and_found_again_by_its_endpoint,
    a_device_registered_by_another_user_moves_to_them,
    a_removed_device_is_kept_with_who_and_why_audited_and_comes_back_when_registered_again,
    concurrent_registrations_of_one_endpoint_end_with_one_row,
    deleting_a_user_deletes_their_devices,
    a_success_is_recorded_on_the_devices_that_had_it,
);

fn web(endpoint: &str, label: Option<&str>) -> NewPushDevice {
    NewPushDevice {
        kind: "web".into(),
        address: endpoint.into(),
        p256dh: Some("BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4".into()),
        auth: Some("BTBZMqHH6r4Tts7J_aSIgg".into()),
        label: label.map(str::to_owned),
    }
}

fn fcm(token: &str) -> NewPushDevice {
    NewPushDevice { kind: "fcm".into(), address: token.into(), p256dh: None, auth: None, label: None }
}

fn later(s: i64) -> Millis {
    Millis(T0.0 + s * 1000)
}

async fn a_device_is_created_once_and_found_again_by_its_endpoint(db: &TestDb) {
    let s = &db.store;
    let first = s.register_push_device("ada", &web("https://push.example.net/a", Some("Laptop")), T0).await.unwrap();
    let Registered::Created(created) = first else { panic!("{first:?}") };
    assert_eq!((created.kind.as_str(), created.label.as_deref()), ("web", Some("Laptop")));
    assert_eq!((created.created_at, created.last_success_at, created.removed_at), (T0, None, None));

    // The same endpoint again, without a label and with new keys: the same
    // row, its label kept, its keys replaced.
    let mut again = web("https://push.example.net/a", None);
    again.auth = Some("AAAAAAAAAAAAAAAAAAAAAA".into());
    let second = s.register_push_device("ada", &again, later(5)).await.unwrap();
    let Registered::Existing { device, moved_from } = second else { panic!("{second:?}") };
    assert_eq!((device.id.as_str(), moved_from), (created.id.as_str(), None));
    assert_eq!((device.label.as_deref(), device.auth.as_deref()), (Some("Laptop"), Some("AAAAAAAAAAAAAAAAAAAAAA")));
    assert_eq!(device.created_at, T0, "registering again does not make it new");

    // The same text as an FCM token is another device: the kind is part of the key.
    let token = s.register_push_device("ada", &fcm("https://push.example.net/a"), T0).await.unwrap();
    assert!(matches!(token, Registered::Created(_)), "{token:?}");
    let live = s.push_devices("ada", false).await.unwrap();
    assert_eq!(live.iter().map(|d| d.kind.as_str()).collect::<Vec<_>>(), ["web", "fcm"], "oldest first");
}

async fn a_device_registered_by_another_user_moves_to_them(db: &TestDb) {
    let s = &db.store;
    let Registered::Created(first) = s.register_push_device("ada", &fcm("tok-1"), T0).await.unwrap() else {
        panic!("created")
    };
    let moved = s.register_push_device("bob", &fcm("tok-1"), later(1)).await.unwrap();
    let Registered::Existing { device, moved_from } = moved else { panic!("{moved:?}") };
    assert_eq!((device.id, device.user_id.as_str(), moved_from.as_deref()), (first.id, "bob", Some("ada")));
    assert!(s.push_devices("ada", true).await.unwrap().is_empty(), "not Ada's any more, not even as removed");
    assert_eq!(s.push_devices("bob", false).await.unwrap().len(), 1);
}

async fn a_removed_device_is_kept_with_who_and_why_audited_and_comes_back_when_registered_again(db: &TestDb) {
    let s = &db.store;
    let Registered::Created(d) =
        s.register_push_device("ada", &web("https://push.example.net/r", Some("Pixel")), T0).await.unwrap()
    else {
        panic!("created")
    };
    assert!(
        !s.remove_push_device("bob", &d.id, "api", "deleted through the API", later(1)).await.unwrap(),
        "not Bob's"
    );
    assert!(!s.remove_push_device("ada", "no-such-id", "api", "x", later(1)).await.unwrap());
    assert!(
        s.remove_push_device("ada", &d.id, "provider", "the push service answered 410 Gone", later(2)).await.unwrap()
    );
    assert!(!s.remove_push_device("ada", &d.id, "api", "again", later(3)).await.unwrap(), "already removed");

    assert!(s.push_devices("ada", false).await.unwrap().is_empty(), "delivery does not see it");
    let all = s.push_devices("ada", true).await.unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(
        (all[0].removed_at, all[0].removed_by.as_deref(), all[0].removed_reason.as_deref()),
        (Some(later(2)), Some("provider"), Some("the push service answered 410 Gone"))
    );
    let audit = s.audit_for_target("user:ada", 10).await.unwrap();
    assert_eq!(audit.len(), 1, "one removal, one row: {audit:?}");
    assert_eq!((audit[0].action.as_str(), audit[0].operator_email.as_str()), ("push_device.removed", "provider"));
    let detail = audit[0].detail.as_deref().unwrap();
    for part in ["web", "\"Pixel\"", "410 Gone", d.id.as_str()] {
        assert!(detail.contains(part), "{detail} names {part}");
    }

    let back = s.register_push_device("ada", &web("https://push.example.net/r", None), later(4)).await.unwrap();
    let Registered::Existing { device, moved_from: None } = back else { panic!("{back:?}") };
    assert_eq!(device.id, d.id, "the same row comes back");
    assert_eq!((device.removed_at, device.removed_by, device.removed_reason), (None, None, None));
    assert_eq!(s.push_devices("ada", false).await.unwrap().len(), 1, "live again");
}

async fn concurrent_registrations_of_one_endpoint_end_with_one_row(db: &TestDb) {
    // Eight registrations of one endpoint at once (two instances, a
    // browser that retries), each on its own connection: all end on one
    // row, exactly one of them created it.
    let tasks = 8;
    let barrier = Arc::new(tokio::sync::Barrier::new(tasks));
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (store, barrier) = (db.store.clone(), barrier.clone());
        handles.push(tokio::spawn(async move {
            barrier.wait().await;
            store.register_push_device("ada", &web("https://push.example.net/race", None), T0).await
        }));
    }
    let mut ids = std::collections::BTreeSet::new();
    let mut created = 0;
    for h in handles {
        match h.await.unwrap().unwrap() {
            Registered::Created(d) => {
                created += 1;
                ids.insert(d.id);
            }
            Registered::Existing { device, moved_from } => {
                assert_eq!(moved_from, None);
                ids.insert(device.id);
            }
        }
    }
    assert_eq!((created, ids.len()), (1, 1), "{ids:?}");
    assert_eq!(db.store.push_devices("ada", true).await.unwrap().len(), 1);
}

async fn deleting_a_user_deletes_their_devices(db: &TestDb) {
    let s = &db.store;
    s.register_push_device("ada", &fcm("ada-phone"), T0).await.unwrap();
    let Registered::Created(gone) = s.register_push_device("ada", &fcm("ada-old"), T0).await.unwrap() else {
        panic!("created")
    };
    s.remove_push_device("ada", &gone.id, "provider", "UNREGISTERED", T0).await.unwrap();
    s.register_push_device("bob", &fcm("bob-phone"), T0).await.unwrap();
    let erased = s.erase_user(&user("ada"), later(1)).await.unwrap();
    assert_eq!(erased.push_devices_deleted, 2, "removed ones too: {erased:?}");
    assert!(s.push_devices("ada", true).await.unwrap().is_empty());
    assert_eq!(s.push_devices("bob", false).await.unwrap().len(), 1, "only Ada's");
}

async fn a_success_is_recorded_on_the_devices_that_had_it(db: &TestDb) {
    let s = &db.store;
    let Registered::Created(a) = s.register_push_device("ada", &fcm("a"), T0).await.unwrap() else { panic!() };
    let Registered::Created(b) = s.register_push_device("ada", &fcm("b"), T0).await.unwrap() else { panic!() };
    s.mark_push_success(&[], later(1)).await.unwrap();
    s.mark_push_success(std::slice::from_ref(&a.id), later(2)).await.unwrap();
    let devices = s.push_devices("ada", false).await.unwrap();
    let success = |id: &str| devices.iter().find(|d| d.id == id).unwrap().last_success_at;
    assert_eq!((success(&a.id), success(&b.id)), (Some(later(2)), None));
}

fn main() -> std::process::ExitCode {
    common::harness::main(backend_trials())
}
