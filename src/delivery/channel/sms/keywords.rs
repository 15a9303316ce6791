//! The keywords an inbound text can be: STOP, START or HELP.
//!
//! The whole message, trimmed, compared without regard to case: `stop`,
//! ` Stop ` and `STOP` stop; `stop texting me` and `please STOP` do not.
//! That is the rule US carriers' guidelines (CTIA) and Twilio's own opt-out
//! handling apply. Rejected: looking for the word anywhere in the message,
//! which would unsubscribe someone who replied "don't stop the reminders",
//! and trimming punctuation (`STOP!`), which no provider does, so Herald
//! and Twilio would then disagree on whether a number is opted out.
//!
//! The lists are those of the issue that asked for the feature: STOP,
//! STOPALL, UNSUBSCRIBE, CANCEL, END, QUIT; START, UNSTOP; HELP.

/// What an inbound message asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keyword {
    /// No more messages to this number (except transactional ones).
    Stop,
    /// Messages again: lifts a suppression that a STOP made, never one an
    /// operator made.
    Start,
    /// Answered with `sms.help_text`.
    Help,
}

const STOP: [&str; 6] = ["STOP", "STOPALL", "UNSUBSCRIBE", "CANCEL", "END", "QUIT"];
const START: [&str; 2] = ["START", "UNSTOP"];
const HELP: [&str; 1] = ["HELP"];

/// The keyword `text` is, if it is one; `None` for any other message.
pub fn keyword(text: &str) -> Option<Keyword> {
    let word = text.trim();
    let is = |list: &[&str]| list.iter().any(|k| k.eq_ignore_ascii_case(word));
    if is(&STOP) {
        Some(Keyword::Stop)
    } else if is(&START) {
        Some(Keyword::Start)
    } else if is(&HELP) {
        Some(Keyword::Help)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_keyword_in_any_case_with_surrounding_space() {
        for w in ["STOP", "stop", " Stop\n", "STOPALL", "unsubscribe", "Cancel", "END", "quit"] {
            assert_eq!(keyword(w), Some(Keyword::Stop), "{w:?}");
        }
        for w in ["START", "start ", "UnStop"] {
            assert_eq!(keyword(w), Some(Keyword::Start), "{w:?}");
        }
        assert_eq!(keyword("\thelp "), Some(Keyword::Help));
    }

    #[test]
    fn only_the_whole_message_counts() {
        for w in ["stop texting me", "please STOP", "STOP!", "S T O P", "", "  ", "stopp", "ending"] {
            assert_eq!(keyword(w), None, "{w:?}");
        }
        // Case folding is ASCII's: a dotless or long-s lookalike is not STOP.
        assert_eq!(keyword("ſtop"), None);
    }
}
