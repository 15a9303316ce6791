//! `herald topics list|show|subscribe`: topics and their subscribers from a
//! terminal, on the store the API's `/v1/topics` routes use, with the same
//! checks of a topic key and a user id (each refusal names the argument).

use clap::Subcommand;

use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::domain::{TopicKey, UserId};
use crate::http::topics::MAX_USER_IDS;
use crate::store::{Page, TopicStore};

#[derive(Debug, Subcommand)]
pub enum TopicsCommand {
    /// List topics in key order: key, name, created.
    List {
        /// Start after this key (the last one of the previous page)
        #[arg(long)]
        after: Option<String>,
        /// How many, 1 to 1000
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Show a topic, its subscriber count and its first subscribers.
    Show {
        /// The topic's key, such as doc:42
        key: String,
        /// How many subscribers to list, 1 to 1000
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// Subscribe users to a topic (created if unknown); users already
    /// subscribed are left as they were.
    Subscribe {
        /// The topic's key, such as doc:42
        key: String,
        /// The host application's ids for the users
        #[arg(required = true)]
        users: Vec<String>,
    },
}

pub(super) async fn run(config: &Config, cmd: TopicsCommand) -> anyhow::Result<()> {
    match cmd {
        TopicsCommand::List { after, limit } => {
            let limit = checked_limit(limit)?;
            let after = after.map(|a| TopicKey::parse("--after", &a)).transpose()?;
            let store = super::ready_store(config).await?;
            let topics = store.list_topics(Page { after: after.as_ref().map(TopicKey::as_str), limit }).await?;
            if topics.is_empty() {
                println!("no topics");
            }
            for t in &topics {
                println!(
                    "{}  {}  created {}",
                    t.topic_key,
                    t.name.as_deref().unwrap_or("-"),
                    t.created_at.to_rfc3339()
                );
            }
            Ok(())
        }
        TopicsCommand::Show { key, limit } => {
            let limit = checked_limit(limit)?;
            let key = TopicKey::parse("KEY", &key)?;
            let store = super::ready_store(config).await?;
            let Some((topic, count)) = store.get_topic(&key).await? else {
                anyhow::bail!("no topic {:?}", key.as_str());
            };
            println!("topic {}", topic.topic_key);
            println!("  name: {}", topic.name.as_deref().unwrap_or("-"));
            println!("  description: {}", topic.description.as_deref().unwrap_or("-"));
            println!("  created {}, updated {}", topic.created_at.to_rfc3339(), topic.updated_at.to_rfc3339());
            println!("  {count} subscriber(s)");
            for s in store.subscribers(&key, Page { after: None, limit }).await? {
                println!("  {}  since {}", s.user_id, s.created_at.to_rfc3339());
            }
            Ok(())
        }
        TopicsCommand::Subscribe { key, users } => {
            let key = TopicKey::parse("KEY", &key)?;
            let users = users.iter().map(|u| UserId::parse("USER", u)).collect::<Result<Vec<_>, _>>()?;
            let store = super::ready_store(config).await?;
            let (mut added, mut created) = (0, false);
            // The API's limit per call, as the API would be called.
            for chunk in users.chunks(MAX_USER_IDS) {
                let done = store.subscribe(&key, chunk, SystemClock.now()).await?;
                added += done.added;
                created |= done.topic_created;
            }
            let distinct = users.iter().collect::<std::collections::HashSet<_>>().len() as u64;
            println!(
                "{}{added} subscribed, {} already subscribed",
                if created { format!("topic {} created; ", key.as_str()) } else { String::new() },
                distinct.saturating_sub(added)
            );
            Ok(())
        }
    }
}

fn checked_limit(limit: u32) -> anyhow::Result<u32> {
    if !(1..=1000).contains(&limit) {
        anyhow::bail!("--limit: {limit} is not accepted; expected 1 to 1000");
    }
    Ok(limit)
}
