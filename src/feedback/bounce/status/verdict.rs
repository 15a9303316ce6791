//! The hard/soft decision: the words of a refusal first (a missing
//! mailbox, a missing domain, a full mailbox, a block), then the codes, then
//! the SMTP command the refusal answered, the way a postmaster reads a
//! bounce. The stock phrases are lists here, beside the rules that use them,
//! so a new wording is one line and one test.

use super::super::BounceKind;
use super::{Stage, vagueness};

/// The stock phrases for a missing mailbox (see [`Words::UserGone`]).
const NO_SUCH_USER: &[&str] = &[
    "user unknown",
    "unknown user",
    "unknown recipient",
    "recipient unknown",
    "address unknown",
    "unknown address",
    "unknown mailbox",
    "unknown local part",
    "unknown local-part",
    "no such user",
    "no such mailbox",
    "no such recipient",
    "no such address",
    "no such person",
    "no such account",
    "no such local user",
    "mailbox unknown",
    "addressee unknown",
    "bad recipient",
    "utilisateur inconnu",
];

/// Phrases of an explicit failed lookup (see [`Words::UserNotFound`]).
const NOT_FOUND: &[&str] = &[
    "unknown e-mail address",
    "unknown email address",
    "no mailbox here",
    "no mailbox by that name",
    "no account by that name",
    "user not found",
    "user not known",
    "user not exist",
    "user does not exist",
    "user doesn't exist",
    "recipient not found",
    "recipient does not exist",
    "recipient not exist",
    "mailbox not found",
    "mailbox does not exist",
    "mailbox not present",
    // RFC 5321's text for 550 ("Requested action not taken: mailbox
    // unavailable") also covers policy refusals, but in practice it is the
    // big providers' answer to an unknown recipient (Outlook.com/Hotmail's
    // "550 5.5.0 Requested action not taken: mailbox unavailable"); a
    // policy refusal says so in words of [`SOFT_DESPITE_CODE`]. Tried as the
    // weak kind of evidence (needing a 5.1.x code or RCPT TO), it turned
    // Hotmail's unknown users soft.
    "mailbox unavailable",
    "mailbox is unavailable",
    "mailbox doesn't exist",
    "mailbox invalid",
    "address does not exist",
    "address doesn't exist",
    "account does not exist",
    "account doesn't exist",
    "address couldn't be found",
    "address could not be found",
    "invalid recipient",
    "invalid user",
    "invalid mailbox",
    "invalid address",
    "not a valid mailbox",
    "not a valid recipient",
    "not a valid user",
    "is not a known user",
    "no valid recipients",
    "recipient name is not recognized",
    "not listed in domino directory",
    "not listed in public name & address book",
    "there is no one at this address",
    "address no longer accepts mail",
    "no longer valid",
    "unknown or illegal alias",
    "bad destination mailbox",
    "destinataire invalide",
    "unrouteable address",
    // IMail's "Invalid final delivery userid".
    "invalid final delivery userid",
];

/// A mail provider's own verdict that it holds no such account, worded so
/// that it can only come from its directory (see [`Words::AccountGone`]).
const NO_SUCH_ACCOUNT: &[&str] = &[
    // Yahoo and AOL: "554 delivery error: dd This user doesn't have a
    // yahoo.com account". Yahoo checks recipients after DATA, so the stage
    // rule that softens "user unknown" at DATA must not apply to it.
    "user doesn't have a",
    // Gmail: "The email account that you tried to reach does not exist".
    "tried to reach does not exist",
    // Exchange's resolver (`RESOLVER.ADR.RecipNotFound`, `RecipientNotFound`),
    // often the only words of its bounces.
    "recipnotfound",
    "recipientnotfound",
];

/// Phrases saying the recipient's domain or host does not exist or takes no
/// mail at all (null MX, no SMTP service).
const NO_SUCH_HOST: &[&str] = &[
    "host unknown",
    "unknown host",
    "host not found",
    "host or domain name not found",
    "domain not found",
    "domain does not exist",
    "domain doesn't exist",
    "no such domain",
    "unknown domain",
    "domain name not found",
    "name or service not known",
    "nodename nor servname",
    "nxdomain",
    "no mx found",
    "no mx record",
    "does not accept mail",
    "doesn't accept mail",
    "accepts no mail",
    "not accepting mail",
    "no smtp service",
    "null mx",
    "mail for this domain is not accepted",
    // A failed DNS lookup of the recipient's domain or host, worded by the
    // MTA rather than coded ("DNS lookup failed", qmail's "couldn't find
    // any host named", Exchange's "domain name in the email address is
    // incorrect"). A lookup that failed for a passing reason says so
    // ("temporary failure in name resolution", SERVFAIL) and is soft.
    "dns lookup fail",
    "dns lookup error",
    "couldn't find any host",
    "could not find any host",
    "no such host",
    "domain name in the email address is incorrect",
    "domain not reachable",
    // Exchange's `SMTPSEND.DNS.NonExistentDomain` and Exim's "all relevant
    // MX records point to non-existent hosts".
    "nonexistentdomain",
    "nonexistent domain",
    "non-existent domain",
    "nonexistent host",
    "non-existent host",
    "no mx or a record",
];

/// Phrases saying the address moved away for good.
const MOVED: &[&str] = &["has moved", "address has changed", "moved permanently"];

/// Phrases that make a failure soft even when the code or another phrase
/// looks like "no such user": the mailbox exists but is full or disabled,
/// or the message (not the address) was refused: spam, policy, size,
/// reputation, rate limits, expired retries, or a sender-side rejection.
const SOFT_DESPITE_CODE: &[&str] = &[
    "mailbox full",
    "mailbox is full",
    "mailfolder is full",
    "box is full",
    "quota",
    "over the limit",
    "exceeds allowed size",
    "exceeded storage",
    "insufficient storage",
    "storage allocation",
    "too much mail",
    "mailbox exceeded",
    "exceeded the local limit",
    "spam",
    "blocked",
    "blacklist",
    "blocklist",
    "denylist",
    "listed at",
    "listed on",
    "reputation",
    "policy",
    "dmarc",
    "spf ",
    "dkim",
    "unauthenticated",
    "authentication",
    "relay access denied",
    "relaying denied",
    "not permitted to relay",
    "rate limit",
    "too many",
    "try again later",
    "temporarily",
    "greylist",
    "virus",
    "malware",
    "message size",
    "too large",
    "too big",
    "size limit",
    "suspended",
    "disabled",
    "deactivated",
    "expired",
    "retry timeout",
    "timed out",
    "timeout",
    "connection refused",
    "sender address",
    "sender domain",
    "after mail from",
    "unroutable sender",
    "reverse dns",
    "ptr record",
    "access denied",
    "header error",
    "content rejected",
    "unexpected name server reply",
    "servfail",
    "temporary failure in name resolution",
    "recipient preferences",
    "refused due to",
    "command output:",
];

/// Enhanced codes that by themselves mean the address or domain is gone:
/// X.1.1 bad mailbox, X.1.2 bad domain, X.1.3 malformed address, X.1.6
/// moved, X.1.10 null MX (RFC 7505), X.4.4 unroutable (no such host).
fn hard_status(status: &str) -> bool {
    matches!(status, "5.1.1" | "5.1.2" | "5.1.3" | "5.1.6" | "5.1.10" | "5.4.4")
}

fn contains_any(haystack: &str, needles: &[&str]) -> bool {
    needles.iter().any(|n| haystack.contains(n))
}

/// Hard or soft for a failed recipient.
///
/// Hard means sending again can never work: no such user, no such domain,
/// moved, or a domain that accepts no mail. Words outrank codes because servers
/// misuse codes both ways; among words, a sign that the *message* or the
/// *mailbox state* was the problem (full, spam, policy...) outranks "no such
/// user", since those refusals often reuse user-unknown wording and codes.
///
/// A false hard bounce costs more than a false soft one (a good address is
/// suppressed for good, while a dead one soft-bounces again and is caught
/// by the retry policy), so the stock "user unknown" phrases only count as
/// hard with corroboration: a 5.1.x code, or the refusal answering RCPT TO.
///
/// Rejected alternative: a 35-way reason taxonomy like sisimai's; Herald only
/// acts on hard vs soft, and every extra class is a new way to be wrong.
pub(crate) fn classify(status: Option<&str>, reply: Option<u16>, text: &str, stage: Option<Stage>) -> BounceKind {
    classify_in_context(status, reply, text, "", stage)
}

/// [`classify`] with a second, weaker text: words in `own` (the recipient's
/// own diagnostic) decide first, then words in `context` (the report's
/// shared preamble and subject), then the codes.
///
/// "User unknown" said in answer to DATA (or to MAIL FROM) is not about the
/// mailbox: a content filter or a sender check is using the phrase. Unless
/// the status code itself names a missing mailbox, that is soft.
pub(crate) fn classify_in_context(
    status: Option<&str>,
    reply: Option<u16>,
    own: &str,
    context: &str,
    stage: Option<Stage>,
) -> BounceKind {
    let transient =
        status.is_some_and(|s| s.starts_with('4')) || (status.is_none() && reply.is_some_and(|r| r / 100 == 4));
    let code_says_gone = status.is_some_and(hard_status);
    // X.2.Y codes describe the state of a mailbox that exists (disabled,
    // full, message too big for it): "user unknown" next to one is a filter
    // or a disabled account talking, unless it answered RCPT TO.
    let code_says_mailbox_exists = status.is_some_and(|s| s.get(1..4) == Some(".2."));
    let local_agent = local_agent_unknown_user(own) || local_agent_unknown_user(context);
    if status == Some("5.4.1") && exchange_directory_rejection(own) {
        return BounceKind::Hard;
    }
    match words(own).or_else(|| words(context)) {
        Some(Words::Soft) => BounceKind::Soft,
        _ if transient => BounceKind::Soft,
        Some(Words::DomainGone) => BounceKind::Hard,
        // The provider's own SMTP answer (it carries a code); quoted without
        // one by a relaying mailer it is only the stock phrase again.
        Some(Words::AccountGone) if status.is_some() || reply.is_some() => BounceKind::Hard,
        Some(Words::AccountGone) if code_says_gone || stage == Some(Stage::Rcpt) || local_agent => BounceKind::Hard,
        Some(Words::AccountGone) => BounceKind::Soft,
        Some(Words::UserGone | Words::UserNotFound) | None if local_agent => BounceKind::Hard,
        Some(Words::UserGone | Words::UserNotFound) if code_says_gone || stage == Some(Stage::Rcpt) => BounceKind::Hard,
        Some(Words::UserGone)
            if stage.is_none()
                && permanent_reply(reply)
                && status.is_none_or(|s| vagueness(s) > 0)
                && names_the_address(own) =>
        {
            BounceKind::Hard
        }
        Some(Words::UserGone) => BounceKind::Soft,
        Some(Words::UserNotFound) if code_says_mailbox_exists => BounceKind::Soft,
        Some(Words::UserNotFound) if matches!(stage, Some(Stage::Data | Stage::Sender)) => BounceKind::Soft,
        Some(Words::UserNotFound) => BounceKind::Hard,
        None => code_verdict(status, reply),
    }
}

/// A record the reporting MTA gave up on (`Action: failed`) whose answer
/// was a temporary "no such mailbox" (`450 4.1.1 <carol@example.org>:
/// Recipient address rejected: User unknown in virtual alias table`).
/// Postfix answers so for a recipient its tables do not know while
/// `soft_bounce` or a 450 `unknown_*_reject_code` is set; the sender then
/// retried until its queue lifetime ran out. Days of the same answer, whose
/// words say the user is unknown, are a hard bounce. A 4.1.1 whose words say
/// the failure passes ("temporary lookup failure") stays soft.
pub(crate) fn gave_up_on_missing_mailbox(status: Option<&str>, own: &str) -> bool {
    status == Some("4.1.1") && matches!(words(own), Some(Words::UserGone | Words::UserNotFound | Words::AccountGone))
}

fn permanent_reply(reply: Option<u16>) -> bool {
    reply.is_some_and(|r| r / 100 == 5)
}

/// "User unknown" said of an address the reply itself names, directly
/// before the phrase: `550 <carol@example.org>: User unknown` (Postfix's
/// and most servers' form), Sendmail's `<carol@example.org>... User
/// unknown`. That is the shape of an answer to RCPT TO, which echoes the one
/// recipient it refuses; a content filter answering DATA speaks of the
/// message, for all its recipients at once. Used only when nothing tells
/// the SMTP command (see [`smtp_stage`]) and the codes are vague: a
/// specific code (`5.2.1`, disabled) says more than the shape.
fn names_the_address(own: &str) -> bool {
    let lower = own.split_whitespace().collect::<Vec<_>>().join(" ").to_ascii_lowercase();
    NO_SUCH_USER.iter().any(|phrase| {
        lower.match_indices(phrase).any(|(i, _)| {
            let before = lower[..i].trim_end();
            let Some(before) = before.strip_suffix(':').or_else(|| before.strip_suffix("...")) else {
                return false;
            };
            // In angle brackets: a bare `carol@example.org... No such user`
            // is also how content filters (SurfControl) word a refusal.
            let word = before.trim_end().rsplit(' ').next().unwrap_or("");
            word.strip_prefix('<').and_then(|w| w.strip_suffix('>')).is_some_and(|addr| {
                addr.split_once('@').is_some_and(|(local, domain)| {
                    !local.is_empty() && domain.contains('.') && !addr.contains(['<', '>', '(', ')', '[', ']', '"'])
                })
            })
        })
    })
}

/// Exchange Online's directory-based edge blocking: "550 5.4.1 Recipient
/// address rejected: Access denied" is Microsoft's documented answer for a
/// recipient that is not in the receiving organisation's directory. The
/// words alone ("access denied") read like a policy refusal, which is why
/// they count only with the 5.4.1 code Microsoft always sends with them.
fn exchange_directory_rejection(own: &str) -> bool {
    let lower = own.split_whitespace().collect::<Vec<_>>().join(" ").to_ascii_lowercase();
    lower.contains("recipient address rejected: access denied")
}

/// What the words of a diagnostic say, if anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Words {
    /// The mailbox exists or the message was the problem (full, spam...).
    Soft,
    /// The stock "user unknown" phrases. Content filters and anti-spam
    /// gateways answer DATA with them too, so alone they prove nothing; with
    /// a 5.1.x code or at RCPT TO they do.
    UserGone,
    /// An explicit failed directory lookup ("does not exist", "not listed in
    /// ... directory", "recipient name is not recognized"): no filter words
    /// its refusals like that.
    UserNotFound,
    /// No such domain or host, no mail accepted there, or moved away.
    DomainGone,
    /// A provider's directory says the account does not exist, in words no
    /// filter uses. Hard at any SMTP stage: some providers (Yahoo) check
    /// recipients only after DATA.
    AccountGone,
}

fn words(text: &str) -> Option<Words> {
    let lower = text.to_ascii_lowercase();
    if contains_any(&lower, SOFT_DESPITE_CODE) {
        Some(Words::Soft)
    } else if contains_any(&lower, NO_SUCH_HOST) || contains_any(&lower, MOVED) || domain_named_missing(&lower) {
        Some(Words::DomainGone)
    } else if contains_any(&lower, NO_SUCH_ACCOUNT) {
        Some(Words::AccountGone)
    } else if contains_any(&lower, NOT_FOUND) || bare_address_rejected(&lower) {
        Some(Words::UserNotFound)
    } else if contains_any(&lower, NO_SUCH_USER) {
        Some(Words::UserGone)
    } else {
        None
    }
}

/// "Domain example.com <verdict>" with the domain named between the words:
/// Postfix's "domain example.com not reachable", Gmail's "the domain
/// example.com couldn't be found", "domain example.com does not exist". The
/// fixed phrases of [`NO_SUCH_HOST`] cannot hold a name in the middle. A
/// host that did not answer ("host mx.example.com not reachable") is not
/// this: hosts go down and come back, domains that do not exist do not.
fn domain_named_missing(lower: &str) -> bool {
    const VERDICTS: &[&str] =
        &["not reachable", "couldn't be found", "could not be found", "not found", "does not exist", "doesn't exist"];
    VERDICTS.iter().any(|verdict| {
        lower.match_indices(verdict).any(|(i, _)| {
            let before = &lower[..i];
            before.rfind("domain ").is_some_and(|d| {
                let between: Vec<&str> = before[d..].split_whitespace().collect();
                // "domain" and at most the name; "was"/"is" may sit before the verdict.
                let between: Vec<&&str> = between.iter().filter(|w| !matches!(**w, "was" | "is")).collect();
                between.len() <= 2
            })
        })
    })
}

/// A local delivery agent's own "unknown user" (sendmail's `mail.local`,
/// procmail, Postfix's `local`/`virtual`, Dovecot's LDA and LMTP, Cyrus,
/// maildrop), quoted in the session transcript of a bounce. The final
/// mailbox server looked the user up and found nobody: no content filter
/// speaks through these.
///
/// Read line by line: the agent's name (optionally with its `(user)` tag,
/// as Dovecot writes `lda(carol):`) followed by `:` and, on the same line,
/// one of the missing-mailbox phrases. Postfix's `local` and `virtual`
/// print no name, only `unknown user: "carol"` with the looked-up login in
/// quotes, which no remote server's reply looks like. A fixed list of whole
/// strings ("mail.local: unknown user", ...) was the first version; it
/// missed the same agents' other wordings ("User doesn't exist", "Mailbox
/// does not exist") and the `(user)` tag of every agent but one.
pub(crate) fn local_agent_unknown_user(text: &str) -> bool {
    const AGENTS: &[&str] = &[
        "mail.local",
        "procmail",
        "maildrop",
        "dovecot-lda",
        "dovecot",
        "lda",
        "deliver",
        "lmtp",
        "lmtpd",
        "cyrus",
        "local",
        "virtual",
        "local delivery failed",
    ];
    let lower = text.to_ascii_lowercase();
    if lower.contains("unknown user: \"") {
        return true;
    }
    lower.lines().any(|line| {
        AGENTS.iter().any(|agent| {
            line.match_indices(agent).any(|(i, m)| {
                let starts_word = line[..i].chars().next_back().is_none_or(|c| !c.is_ascii_alphanumeric() && c != '.');
                let mut rest = &line[i + m.len()..];
                // Dovecot's `lda(carol):`, `lmtp(carol)<1234><abc>:`.
                while rest.starts_with(['(', '<']) {
                    let close = if rest.starts_with('(') { ')' } else { '>' };
                    match rest.find(close) {
                        Some(end) => rest = &rest[end + 1..],
                        None => break,
                    }
                }
                starts_word
                    && rest.starts_with(':')
                    && (contains_any(rest, NO_SUCH_USER) || contains_any(rest, NOT_FOUND))
                    && !contains_any(rest, SOFT_DESPITE_CODE)
            })
        })
    })
}

/// "Address rejected" as the whole verdict. Postfix writes "Recipient
/// address rejected: <reason>", where the reason after the colon (policy,
/// greylisting, media error...) is what counts; only a bare "address
/// rejected" is a statement about the address itself.
fn bare_address_rejected(lower: &str) -> bool {
    lower.match_indices("address rejected").any(|(i, m)| !lower[i + m.len()..].trim_start().starts_with(':'))
}

/// The verdict of the codes alone: hard only for the codes that name a
/// missing mailbox or domain, or the replies of a domain that takes no mail.
fn code_verdict(status: Option<&str>, reply: Option<u16>) -> BounceKind {
    if status.is_some_and(hard_status) || reply.is_some_and(|r| r == 521 || r == 556) {
        BounceKind::Hard
    } else {
        BounceKind::Soft
    }
}
