//! What the channels have learnt about this instance's credentials, for
//! `/readyz`.
//!
//! A provider that refuses Herald's credential (a wrong VAPID key, a revoked
//! FCM service account, an expired APNs key, a revoked Slack token) fails
//! every message sent through it until an operator acts. That is not one
//! row's problem, so besides failing the row the channel says so here, and
//! `/readyz` answers 503 with the provider's words until a later send
//! through the same provider is accepted (after a fix and a restart, or a
//! key rotation the provider had not seen yet).
//!
//! Rejected: checking credentials by a probe request at start and on every
//! `/readyz`. FCM and APNs have no free "am I authorised" call, a probe
//! would cost a round trip per health check, and it would miss what only a
//! real send shows (a Web Push service refusing the VAPID key a browser
//! subscribed with).
//!
//! Per process: an instance that runs no worker learns nothing here, and
//! its `/readyz` speaks for its database alone.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Shared by the channels that report and the HTTP server that answers.
#[derive(Clone, Default)]
pub struct ChannelHealth {
    refused: Arc<Mutex<BTreeMap<String, String>>>,
}

impl ChannelHealth {
    /// `provider` (e.g. "push: FCM") refused the credential, in `words`.
    pub fn credential_refused(&self, provider: &str, words: &str) {
        let mut refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        refused.insert(provider.to_owned(), words.to_owned());
    }

    /// `provider` accepted a message: its credential works again.
    pub fn accepted(&self, provider: &str) {
        let mut refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        refused.remove(provider);
    }

    /// Each provider whose credential was refused and not since accepted,
    /// with its words, sorted by provider.
    pub fn problems(&self) -> Vec<(String, String)> {
        let refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        refused.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_stands_until_the_same_provider_accepts() {
        let health = ChannelHealth::default();
        assert!(health.problems().is_empty());
        health.credential_refused("push: FCM", "FCM answered 401: UNAUTHENTICATED");
        health.accepted("push: APNs");
        assert_eq!(health.problems(), vec![("push: FCM".into(), "FCM answered 401: UNAUTHENTICATED".into())]);
        health.accepted("push: FCM");
        assert!(health.problems().is_empty());
    }
}
