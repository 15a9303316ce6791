//! Tests of the public entry point: errors, robustness, and one hand-written
//! message per kind.

use super::*;

/// A small deterministic generator, so the robustness tests need no crate.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}

const DSN_WITH_OUTBOX_ID: &str = "\
From: Mail Delivery System <MAILER-DAEMON@mx.example.net>
To: bounces@herald.example.com
Subject: Undelivered Mail Returned to Sender
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status; boundary=\"B1\"

--B1
Content-Type: text/plain

<kiji@example.org>: host mx.example.org[192.0.2.1] said: 550 5.1.1
    <kiji@example.org>: Recipient address rejected: User unknown (in reply to
    RCPT TO command)

--B1
Content-Type: message/delivery-status

Reporting-MTA: dns; mx.example.net

Final-Recipient: rfc822; Kiji@Example.org
Original-Recipient: rfc822; kiji@example.org
Action: failed
Status: 5.1.1
Remote-MTA: dns; mx.example.org
Diagnostic-Code: smtp; 550 5.1.1 <kiji@example.org>: Recipient address
    rejected: User unknown in local recipient table

--B1
Content-Type: text/rfc822-headers

From: Herald <news@herald.example.com>
To: kiji@example.org
Subject: Hello
Message-ID: <out-42@herald.example.com>
X-Herald-Outbox-Id: obx_01HZY3

--B1--
";

const DELAYED_DSN: &str = "\
From: MAILER-DAEMON@mx.example.net
To: bounces@herald.example.com
Subject: Delivery Status Notification (Delay)
Content-Type: multipart/report; report-type=delivery-status; boundary=\"D\"

--D
Content-Type: text/plain

Delivery to kiji@example.org has been delayed; we will keep trying.

--D
Content-Type: message/delivery-status

Reporting-MTA: dns; mx.example.net

Final-Recipient: rfc822; kiji@example.org
Action: delayed
Status: 4.4.1
Diagnostic-Code: smtp; 421 4.4.1 Connection timed out
Will-Retry-Until: Fri, 3 May 2024 10:00:00 +0000

--D
Content-Type: message/rfc822

Message-ID: <out-43@herald.example.com>
X-Herald-Outbox-Id: obx_43
To: kiji@example.org
From: news@herald.example.com
Subject: Hi

Hello
--D--
";

const AUTO_REPLY: &str = "\
From: Kiji Tora <Kiji@Example.org>
To: news@herald.example.com
Subject: Out of Office: Hello
Auto-Submitted: auto-replied
In-Reply-To: <out-44@herald.example.com>

I am away until Monday.
";

const ARF: &str = "\
From: fbl@isp.example
To: abuse@herald.example.com
Subject: Abuse report
MIME-Version: 1.0
Content-Type: multipart/report; report-type=feedback-report; boundary=\"F\"

--F
Content-Type: text/plain

This is an abuse report.

--F
Content-Type: message/feedback-report

Feedback-Type: abuse
User-Agent: ISP-FBL/1.0
Version: 1
Original-Rcpt-To: <kiji@example.org>

--F
Content-Type: message/rfc822

Message-ID: <out-45@herald.example.com>
X-Herald-Outbox-Id: obx_45
To: kiji@example.org
From: news@herald.example.com
Subject: Hi

Hello
--F--
";

const QMAIL: &str = "\
From: MAILER-DAEMON@mx.example.net
To: news@herald.example.com
Subject: failure notice

Hi. This is the qmail-send program at mx.example.net.
I'm afraid I wasn't able to deliver your message to the following addresses.
This is a permanent error; I've given up. Sorry it didn't work out.

<kiji@example.org>:
192.0.2.1 does not like recipient.
Remote host said: 550 5.1.1 <kiji@example.org>... User Unknown
Giving up on 192.0.2.1.

<mike@example.org>:
Remote host said: 552 5.2.2 <mike@example.org>... Mailbox Full

--- Below this line is a copy of the message.

Return-Path: <news@herald.example.com>
Message-ID: <out-46@herald.example.com>
X-Herald-Outbox-Id: obx_46
From: news@herald.example.com
To: kiji@example.org, mike@example.org
Subject: Hi

Hello
";

#[test]
fn empty_input_is_an_error() {
    assert_eq!(parse(b""), Err(ParseError::Empty));
    assert_eq!(parse(b" \r\n\t\n"), Err(ParseError::Empty));
}

#[test]
fn oversized_input_is_an_error() {
    let raw = vec![b'a'; MAX_INPUT_BYTES + 1];
    assert_eq!(parse(&raw), Err(ParseError::TooLarge { size: MAX_INPUT_BYTES + 1, limit: MAX_INPUT_BYTES }));
    let message = ParseError::TooLarge { size: 20, limit: 10 }.to_string();
    assert!(message.contains("20 bytes") && message.contains("10-byte limit"));
}

#[test]
fn twenty_mebibytes_do_not_panic() {
    let mut raw = DSN_WITH_OUTBOX_ID.as_bytes().to_vec();
    raw.resize(20 * 1024 * 1024, b'x');
    assert!(matches!(parse(&raw), Err(ParseError::TooLarge { .. })));
}

#[test]
fn garbage_does_not_panic() {
    let mut rng = Lcg(7);
    for len in [1usize, 2, 3, 17, 100, 4096, 65_536] {
        for _ in 0..20 {
            let raw: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            if let Ok(report) = parse(&raw) {
                assert!(report.recipients.len() <= MAX_RECIPIENTS);
            }
        }
    }
    assert!(matches!(parse(b"\x00\xff\xfe binary"), Ok(_) | Err(ParseError::NotAMessage(_))));
}

#[test]
fn truncated_and_mangled_messages_do_not_panic() {
    let mut rng = Lcg(42);
    for sample in [DSN_WITH_OUTBOX_ID, DELAYED_DSN, AUTO_REPLY, ARF, QMAIL] {
        let bytes = sample.as_bytes();
        for cut in 0..bytes.len() {
            let _ = parse(&bytes[..cut]);
        }
        for _ in 0..300 {
            let mut mangled = bytes.to_vec();
            for _ in 0..(1 + rng.next() % 8) {
                let at = (rng.next() as usize) % mangled.len();
                match rng.next() % 3 {
                    0 => mangled[at] = rng.next() as u8,
                    1 => {
                        mangled.remove(at);
                    }
                    _ => mangled.insert(at, b"\n-:;<>@.\"="[(rng.next() % 10) as usize]),
                }
            }
            let _ = parse(&mangled);
        }
    }
}

#[test]
fn near_limit_adversarial_input_is_bounded() {
    // Just under the limit: a "bounce" whose body is one long line of
    // addresses, the worst case for the address and block scans.
    let mut raw = b"From: MAILER-DAEMON@x.example\nSubject: Undelivered Mail\n\n".to_vec();
    let filler = b"550 5.1.1 <a@b.example>, user unknown ";
    while raw.len() + filler.len() < MAX_INPUT_BYTES {
        raw.extend_from_slice(filler);
    }
    let started = std::time::Instant::now();
    let report = parse(&raw).expect("a message");
    assert!(report.recipients.len() <= 1);
    assert!(started.elapsed() < std::time::Duration::from_secs(30), "took {:?}", started.elapsed());
}

#[test]
fn dsn_yields_hard_bounce_and_outbox_id() {
    let report = parse(DSN_WITH_OUTBOX_ID.as_bytes()).expect("parses");
    assert_eq!(report.herald_outbox_id.as_deref(), Some("obx_01HZY3"));
    assert_eq!(report.original_message_id.as_deref(), Some("out-42@herald.example.com"));
    assert_eq!(report.original_to.as_deref(), Some("kiji@example.org"));
    let [r] = report.recipients.as_slice() else {
        panic!("one recipient expected: {report:?}");
    };
    assert_eq!(r.recipient, "kiji@example.org");
    assert_eq!(r.kind, BounceKind::Hard);
    assert_eq!(r.status.as_deref(), Some("5.1.1"));
    assert_eq!(r.reply_code, Some(550));
    assert_eq!(r.herald_outbox_id.as_deref(), Some("obx_01HZY3"));
    assert_eq!(r.remote_mta.as_deref(), Some("mx.example.org"));
    assert!(r.reason.starts_with("550 5.1.1 <kiji@example.org>: Recipient address rejected"));
}

#[test]
fn delayed_dsn_is_delayed() {
    let report = parse(DELAYED_DSN.as_bytes()).expect("parses");
    let [r] = report.recipients.as_slice() else {
        panic!("one recipient expected: {report:?}");
    };
    assert_eq!(r.kind, BounceKind::Delayed);
    assert_eq!(r.status.as_deref(), Some("4.4.1"));
    assert_eq!(r.herald_outbox_id.as_deref(), Some("obx_43"));
}

#[test]
fn auto_reply_is_not_a_bounce() {
    let report = parse(AUTO_REPLY.as_bytes()).expect("parses");
    let [r] = report.recipients.as_slice() else {
        panic!("one recipient expected: {report:?}");
    };
    assert_eq!(r.recipient, "kiji@example.org");
    assert_eq!(r.kind, BounceKind::AutoReply);
    assert_eq!(r.status, None);
}

#[test]
fn arf_is_a_complaint() {
    let report = parse(ARF.as_bytes()).expect("parses");
    let [r] = report.recipients.as_slice() else {
        panic!("one recipient expected: {report:?}");
    };
    assert_eq!(r.recipient, "kiji@example.org");
    assert_eq!(r.kind, BounceKind::Complaint);
    assert_eq!(r.feedback_type.as_deref(), Some("abuse"));
    assert_eq!(r.herald_outbox_id.as_deref(), Some("obx_45"));
}

#[test]
fn free_text_bounce_splits_recipients() {
    let report = parse(QMAIL.as_bytes()).expect("parses");
    assert_eq!(report.herald_outbox_id.as_deref(), Some("obx_46"));
    let got: Vec<_> =
        report.recipients.iter().map(|r| (r.recipient.as_str(), r.kind, r.status.as_deref(), r.reply_code)).collect();
    assert_eq!(
        got,
        [
            ("kiji@example.org", BounceKind::Hard, Some("5.1.1"), Some(550)),
            ("mike@example.org", BounceKind::Soft, Some("5.2.2"), Some(552)),
        ]
    );
}

#[test]
fn ordinary_mail_is_not_a_bounce() {
    let raw = b"From: Kiji <kiji@example.org>\nTo: news@herald.example.com\nSubject: Re: Hi\n\nThanks, write to mike@example.org too.\n";
    assert_eq!(parse(raw).expect("parses").recipients, []);
}

#[test]
fn missing_status_is_not_invented() {
    let raw = b"From: MAILER-DAEMON@mx.example.net\nSubject: Undeliverable: Hi\n\nYour message did not reach the following recipient(s):\nkiji@example.org\n    The recipient name is not recognized\n";
    let report = parse(raw).expect("parses");
    let [r] = report.recipients.as_slice() else {
        panic!("one recipient expected: {report:?}");
    };
    assert_eq!(r.status, None);
    assert_eq!(r.reply_code, None);
    assert_eq!(r.kind, BounceKind::Hard);
}

#[test]
fn ses_notification_by_mail() {
    let raw = br#"From: no-reply@sns.amazonaws.com
Subject: AWS Notification Message

{"notificationType":"Bounce","bounce":{"bounceType":"Permanent","bounceSubType":"General","bouncedRecipients":[{"emailAddress":"Kiji@example.org","action":"failed","status":"5.1.1","diagnosticCode":"smtp; 550 5.1.1 user unknown"}]},"mail":{"messageId":"ses-1","headers":[{"name":"X-Herald-Outbox-Id","value":"obx_47"},{"name":"Message-ID","value":"<out-47@herald.example.com>"}]}}
"#;
    let report = parse(raw).expect("parses");
    assert_eq!(report.herald_outbox_id.as_deref(), Some("obx_47"));
    assert_eq!(report.original_message_id.as_deref(), Some("out-47@herald.example.com"));
    let [r] = report.recipients.as_slice() else {
        panic!("one recipient expected: {report:?}");
    };
    assert_eq!((r.recipient.as_str(), r.kind), ("kiji@example.org", BounceKind::Hard));
    assert_eq!(r.herald_outbox_id.as_deref(), Some("obx_47"));
}

#[test]
fn kinds_serialise_in_snake_case() {
    let names: Vec<String> =
        [BounceKind::Hard, BounceKind::Soft, BounceKind::Complaint, BounceKind::AutoReply, BounceKind::Delayed]
            .iter()
            .map(|k| serde_json::to_string(k).expect("serialises"))
            .collect();
    assert_eq!(names, ["\"hard\"", "\"soft\"", "\"complaint\"", "\"auto_reply\"", "\"delayed\""]);
}

#[test]
fn reason_is_bounded() {
    let long = "x".repeat(3 * MAX_REASON_CHARS);
    assert_eq!(bound_reason(&long).chars().count(), MAX_REASON_CHARS);
    assert_eq!(bound_reason("  a \n\t b  "), "a b");
    assert_eq!(bound_reason(&"é".repeat(600)).chars().count(), MAX_REASON_CHARS);
    // Found by the fuzzer: a word ending exactly at the cap used to be
    // followed by one separator too many.
    let exact = format!("{} tail", "y".repeat(MAX_REASON_CHARS));
    assert_eq!(bound_reason(&exact), "y".repeat(MAX_REASON_CHARS));
    let near = format!("{} z", "y".repeat(MAX_REASON_CHARS - 1));
    assert_eq!(bound_reason(&near).chars().count(), MAX_REASON_CHARS - 1);
}

/// Found by the fuzzer (minimised): a nested `message/rfc822` part cut by a
/// foreign boundary reaches a `debug_assert!(false)` in mail-parser 0.11.9's
/// recovery code, which panics in debug builds only.
const MAIL_PARSER_DEBUG_ASSERT: &[u8] = b"R:0\nContent-Type: multipart/mxed; boundary=\"==_0xAA/0xFFFFFFFFFFFF=/0xB\"7b\n\n--==_0xAA/0xFFFFFFFFFFFF=/0xB\nContent-Type: message/rfc822\nC\n is ful.\n\n--==_x\nContent-Type: message/rfc822\n\n\n--==_0xAA/0xFFFFFFFFFFFF=/0xB--\n";

#[test]
fn mail_parser_debug_assertion_does_not_escape() {
    assert_eq!(MAIL_PARSER_DEBUG_ASSERT.len(), 217);
    let result = parse(MAIL_PARSER_DEBUG_ASSERT);
    assert!(
        matches!(&result, Ok(r) if r.recipients.is_empty()) || matches!(&result, Err(ParseError::NotAMessage(_))),
        "{result:?}"
    );
}

/// A case of `tests/data/bounce-cases/`: its name, the message in the file
/// of that name, and what it must give.
macro_rules! case {
    ($name:literal, $expected:expr) => {
        ($name, include_bytes!(concat!("../../../tests/data/bounce-cases/", $name, ".eml")), $expected)
    };
}

/// The hand-collected cases (`tests/data/bounce-cases/`): each file, the
/// recipient and kind it must give (`None`: not a bounce at all).
/// A case: its name, the raw message, and the recipient and kind expected.
type Case<'a> = (&'a str, &'a [u8], Option<(&'a str, BounceKind)>);

#[test]
fn issue_15_cases() {
    let cases: &[Case] = &[
        case!("dns-lookup-failed-5.4.1", Some(("bob@no-such-domain.example", BounceKind::Hard))),
        case!("domain-not-reachable-no-code", Some(("bob@no-such-domain.example", BounceKind::Hard))),
        case!("host-not-found-no-code", Some(("bob@no-such-domain.example", BounceKind::Hard))),
        case!("procmail-unknown-user-expanded", Some(("carol@example.org", BounceKind::Hard))),
        case!("mail-local-unknown-user-no-code", Some(("carol@example.org", BounceKind::Hard))),
        case!("exchange-delivered-notice", None),
        case!("gmail-relayed-success", None),
        case!("arf-recipient-from-delivered-to", Some(("ann@example.org", BounceKind::Complaint))),
    ];
    for (name, raw, expected) in cases {
        let report = parse(raw).unwrap_or_else(|e| panic!("{name}: {e}"));
        let got: Vec<(&str, BounceKind)> = report.recipients.iter().map(|r| (r.recipient.as_str(), r.kind)).collect();
        match expected {
            Some(e) => assert_eq!(got, vec![*e], "{name}: {:?}", report.recipients),
            None => assert!(got.is_empty(), "{name} is no bounce: {:?}", report.recipients),
        }
    }
}

#[test]
fn a_passing_dns_failure_stays_soft() {
    // SERVFAIL and "temporary failure in name resolution" are the resolver
    // failing, not the domain missing; a 4.x.x code says "try again".
    use super::status::classify;
    assert_eq!(classify(None, None, "DNS lookup failed: SERVFAIL for example.org", None), BounceKind::Soft);
    assert_eq!(classify(Some("4.4.3"), None, "Host or domain name not found", None), BounceKind::Soft);
    assert_eq!(classify(None, None, "Host or domain name not found. Name service error", None), BounceKind::Hard);
    assert_eq!(classify(None, None, "domain example.org not reachable", None), BounceKind::Hard);
    assert_eq!(classify(None, None, "host mx.example.org not reachable", None), BounceKind::Soft);
}

/// Wordings of missing domains, missing mailboxes and
/// local delivery agents that the general rules missed, and the shape of
/// reports that made a recipient's block swallow another's diagnostic.
/// A named message and every recipient it must yield, in order.
type Expected = (&'static str, &'static [u8], &'static [(&'static str, BounceKind)]);

/// Checks every case before failing, so one run names all that differ.
fn check_all(cases: &[Expected]) {
    let mut wrong = Vec::new();
    for (name, raw, expected) in cases {
        let report = parse(raw).unwrap_or_else(|e| panic!("{name}: {e}"));
        let got: Vec<(&str, BounceKind)> = report.recipients.iter().map(|r| (r.recipient.as_str(), r.kind)).collect();
        if got != expected.to_vec() {
            wrong.push(format!("{name}: expected {expected:?}, got {got:?}"));
        }
    }
    assert!(wrong.is_empty(), "{} case(s) wrong:\n{}", wrong.len(), wrong.join("\n"));
}

#[test]
fn issue_27_cases() {
    let cases: &[Expected] = &[
        case!(
            "two-language-report-repeats-recipients",
            &[("ann@example.org", BounceKind::Soft), ("bob@example.org", BounceKind::Hard)]
        ),
        case!("exchange-online-dbeb-5.4.1", &[("bob@example.org", BounceKind::Hard)]),
        case!("yahoo-no-account-after-data", &[("carol@yahoo.example", BounceKind::Hard)]),
        case!("domain-named-could-not-be-found", &[("dave@no-such-domain.example", BounceKind::Hard)]),
        case!("exchange-nonexistent-domain", &[("erin@no-such-domain.example", BounceKind::Hard)]),
        case!("postfix-local-unknown-user-no-code", &[("frank@example.org", BounceKind::Hard)]),
        case!("maildrop-invalid-user-no-code", &[("grace@example.org", BounceKind::Hard)]),
        case!("forwarded-bounce-message-id", &[("henry@example.org", BounceKind::Hard)]),
    ];
    check_all(cases);
}

#[test]
fn guarded_wordings_keep_their_verdicts() {
    use super::status::classify;
    // Outlook.com's answer to an unknown recipient, with no 5.1.x code.
    assert_eq!(
        classify(Some("5.5.0"), Some(550), "550 Requested action not taken: mailbox unavailable", None),
        BounceKind::Hard
    );
    // "Access denied" without Exchange Online's 5.4.1 stays a policy refusal.
    assert_eq!(classify(Some("5.7.1"), Some(550), "Recipient address rejected: Access denied", None), BounceKind::Soft);
    // A host (not a domain) that cannot be found may come back.
    assert_eq!(classify(None, None, "host mx.example.org could not be found", None), BounceKind::Soft);
    // A quoted provider verdict without the provider's code needs corroboration.
    assert_eq!(classify(None, None, "This user doesn't have a example.org account", None), BounceKind::Soft);
}

/// Shapes of real bounces that lost their
/// recipient or verdict, as short synthetic messages.
#[test]
fn real_bounce_shapes_that_lost_their_recipient_or_verdict() {
    let cases: &[Expected] = &[
        (
            // SNS wraps the SES document in a JSON string: its keys are
            // escaped (`\"notificationType\"`), and sendmail folded the line.
            "ses-inside-an-sns-envelope",
            b"From: no-reply@sns.amazonaws.com\nSubject: AWS Notification Message\n\n{\n  \"Type\" : \"Notification\",\n  \"Message\" : \"{\\\"notificationType\\\":\\\"Bounce\\\",\\\"bounce\\\":{\\\"bounceType\\\":\\\"Permanent\\\",\\\"bounceSubType\\\":\\\"General\\\",\\\"bouncedRecipients\\\":[{\\\"emailAddress\\\":\\\"kiji@example.org\\\",\\\"status\\\":\\\"5.1.1\\\",\\\"diagnosticCode\\\":\\\"smtp; 550 5.1.1 user unk!\n nown\\\"}]}}\"\n}\n",
            &[("kiji@example.org", BounceKind::Hard)],
        ),
        (
            // A local part sent as an RFC 2047 encoded word, reported as is.
            "encoded-word-local-part",
            b"From: Mail Delivery Subsystem <MAILER-DAEMON@mx.example.jp>\nSubject: Returned mail: see transcript for details\n\n   ----- The following addresses had permanent fatal errors -----\n<=?utf-8?B?8J+QiA==?=@example.org>\n    (reason: 550 5.1.1 <=?utf-8?B?8J+QiA==?=@example.org>... User unknown)\n",
            &[("=?utf-8?b?8j+qia==?=@example.org", BounceKind::Hard)],
        ),
        (
            // A bounce forwarded by a person: quoted, pasted original and
            // all. The original's headers ("X-Virus-Scanned") are no
            // diagnostic.
            "forwarded-quoted-bounce",
            b"From: s@example.jp\nSubject: Fwd: Returned mail: see transcript for details\n\nBegin forwarded message:\n\n> From: Mail Delivery Subsystem <MAILER-DAEMON>\n> Subject: Returned mail: see transcript for details\n>\n>    ----- The following addresses had permanent fatal errors -----\n> <kiji@example.com>\n>     (reason: 550 5.1.1 <kiji@example.com>... User unknown)\n> Return-Path: <s@example.jp>\n> Received: from mx.example.org\n> \tby mx.example.jp\n> To: kiji@example.com\n> X-Virus-Scanned: ClamAV\n",
            &[("kiji@example.com", BounceKind::Hard)],
        ),
        (
            // Postfix's notice to the postmaster: the recipient was
            // accepted (250 2.1.5), then the message failed after DATA.
            "postfix-server-transcript",
            b"From: MAILER-DAEMON@mx.example.com (Mail Delivery System)\nTo: postmaster@mx.example.com\nSubject: Postfix SMTP server: errors from localhost[127.0.0.1]\n\nTranscript of session follows.\n\n In:  MAIL FROM:<s@example.jp>\n Out: 250 2.1.0 Ok\n In:  RCPT TO:<kiji@example.net>\n Out: 250 2.1.5 Ok\n In:  DATA\n Out: 354 End data with <CR><LF>.<CR><LF>\n Out: 451 4.3.0 Error: queue file write error\n",
            &[("kiji@example.net", BounceKind::Soft)],
        ),
        (
            // The reply names the refused address before the stock phrase.
            "user-unknown-naming-the-address",
            b"From: MAILER-DAEMON@yahoo.example\nSubject: Failure Notice\n\nSorry, we were unable to deliver your message to the following address.\n\n<kiji@example.jp>:\n550: <kiji@example.jp>: User unknown\n",
            &[("kiji@example.jp", BounceKind::Hard)],
        ),
    ];
    check_all(cases);
}

/// A DSN the MTA gave up on after a temporary "user unknown" (Postfix's
/// `450 4.1.1`) is hard; the same record still being retried is delayed.
#[test]
fn failed_after_a_temporary_user_unknown() {
    let dsn = |action: &str| {
        format!(
            "From: MAILER-DAEMON@mx.example.jp\nSubject: Undelivered Mail Returned to Sender\nContent-Type: multipart/report; report-type=delivery-status; boundary=\"b\"\n\n--b\nContent-Type: text/plain\n\nThe mail system\n\n--b\nContent-Type: message/delivery-status\n\nReporting-MTA: dns; mx.example.jp\n\nFinal-Recipient: rfc822; kiji@example.org\nAction: {action}\nStatus: 4.1.1\nDiagnostic-Code: smtp; 450 4.1.1 <kiji@example.org>: Recipient address\n    rejected: User unknown in virtual alias table\n\n--b--\n"
        )
    };
    let kinds = |action: &str| {
        parse(dsn(action).as_bytes()).expect("parses").recipients.iter().map(|r| r.kind).collect::<Vec<_>>()
    };
    assert_eq!(kinds("failed"), [BounceKind::Hard]);
    assert_eq!(kinds("delayed"), [BounceKind::Delayed]);
}
