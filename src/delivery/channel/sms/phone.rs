//! Phone numbers in E.164 (`+14155550101`), parsed once at the edge like an
//! email address, so the rest of Herald (the address hash, suppressions,
//! the transports) only ever holds the one normalised form.
//!
//! Parsed and checked with the `phonenumber` crate, a port of Google's
//! libphonenumber with its metadata: a number must be *valid* for its
//! country (a real area code and length), not only look like digits.
//! Rejected: a regular expression for `+` and 8 to 15 digits, which takes
//! `+10000000000` and `+449999999999` and so lets a typo reach the provider,
//! costing a refused message and, with Twilio, a 21211 on the account.
//!
//! # No default region
//! A number must carry its country code (`+` first). Herald serves users in
//! any country and does not know which one a user is in: `06 12 34 56 78`
//! is a French mobile number or a Dutch one depending on a guess, and a
//! wrong guess texts a stranger. A host application that stores national
//! numbers knows its users' country and can add the code before calling
//! Herald. Rejected: a configured default region (`sms.default_region`),
//! which is right for a one-country deployment and silently wrong for every
//! user outside it; it can be added later without changing stored numbers,
//! since they are all E.164.

use std::fmt;

use phonenumber::Mode;

use crate::domain::InvalidValue;

/// A valid phone number, normalised to E.164.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PhoneNumber(String);

/// What is accepted, for error messages.
pub const EXPECTED: &str =
    "a phone number with its country code, in E.164 or international format (for example \"+14155550101\")";

/// Why a phone number was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PhoneProblem {
    #[error("it is empty")]
    Empty,
    /// No `+`: a national number, whose country Herald would have to guess.
    #[error("it has no country code: start it with + and the country code (no default country is assumed)")]
    NoCountryCode,
    /// Not a phone number at all (letters, too few or too many digits, an
    /// unknown country code).
    #[error("it is not a phone number ({0})")]
    NotANumber(String),
    /// Shaped like a number, but not one that can exist in its country.
    #[error("it is not a valid number for its country code")]
    NotValid,
}

/// A refused phone number: the field it came in, the value, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {value:?} is not accepted: {problem}; expected {EXPECTED}")]
pub struct InvalidPhone {
    pub field: &'static str,
    pub value: String,
    pub problem: PhoneProblem,
}

impl InvalidPhone {
    /// The error without the field's name, for a caller that names the
    /// field itself (a 422's `field`, a command-line flag).
    pub fn unnamed(&self) -> String {
        format!("{:?} is not accepted: {}; expected {EXPECTED}", self.value, self.problem)
    }
}

/// For callers that report every refused value alike (a 422 naming the
/// field): the reason goes into the value shown, the expectation stays.
impl From<InvalidPhone> for InvalidValue {
    fn from(e: InvalidPhone) -> InvalidValue {
        InvalidValue::new(e.field, e.value, EXPECTED)
    }
}

impl PhoneNumber {
    /// The longest input looked at: E.164 has at most 15 digits, and
    /// international formatting adds spaces, dashes and parentheses, never
    /// this many.
    const MAX_INPUT: usize = 64;

    /// Parses `+1 (415) 555-0101`, `+44 20 7946 0958` or `+14155550101`
    /// into E.164. `field` names the input in the error (`phone`).
    pub fn parse(field: &'static str, input: &str) -> Result<PhoneNumber, InvalidPhone> {
        let refuse = |problem| Err(InvalidPhone { field, value: input.to_owned(), problem });
        let s = input.trim();
        if s.is_empty() {
            return refuse(PhoneProblem::Empty);
        }
        if s.len() > Self::MAX_INPUT {
            return refuse(PhoneProblem::NotANumber("too long".into()));
        }
        if !s.starts_with('+') {
            return refuse(PhoneProblem::NoCountryCode);
        }
        let parsed = match phonenumber::parse(None, s) {
            Ok(p) => p,
            Err(e) => return refuse(PhoneProblem::NotANumber(e.to_string())),
        };
        // An extension (`+1 415 555 0101 ext. 2`) cannot receive a text.
        if parsed.extension().is_some() {
            return refuse(PhoneProblem::NotANumber("it has an extension".into()));
        }
        if !parsed.is_valid() {
            return refuse(PhoneProblem::NotValid);
        }
        Ok(PhoneNumber(parsed.format().mode(Mode::E164).to_string()))
    }

    /// `+14155550101`: what is hashed, stored and sent to the provider.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PhoneNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e164(s: &str) -> String {
        PhoneNumber::parse("phone", s).unwrap_or_else(|e| panic!("{s:?}: {e}")).to_string()
    }

    fn problem(s: &str) -> PhoneProblem {
        PhoneNumber::parse("phone", s).expect_err(s).problem
    }

    #[test]
    fn international_formats_normalise_to_e164() {
        assert_eq!(e164("+1 (415) 555-0101"), "+14155550101");
        assert_eq!(e164(" +14155550101 "), "+14155550101");
        assert_eq!(e164("+44 20 7946 0958"), "+442079460958");
        assert_eq!(e164("+33 6 12 34 56 78"), "+33612345678");
        assert_eq!(e164("+49 30 123456"), "+4930123456");
        // A national trunk prefix written after the country code is dropped.
        assert_eq!(e164("+44 (0)20 7946 0958"), "+442079460958");
    }

    #[test]
    fn a_number_without_its_country_code_is_refused_not_guessed() {
        assert_eq!(problem("12345"), PhoneProblem::NoCountryCode);
        assert_eq!(problem("(415) 555-0101"), PhoneProblem::NoCountryCode);
        assert_eq!(problem("06 12 34 56 78"), PhoneProblem::NoCountryCode);
        assert_eq!(problem("  "), PhoneProblem::Empty);
    }

    #[test]
    fn numbers_that_cannot_exist_are_refused() {
        assert!(matches!(problem("+10000000000"), PhoneProblem::NotValid | PhoneProblem::NotANumber(_)));
        assert_eq!(problem("+1 212 000 0000"), PhoneProblem::NotValid);
        assert_eq!(problem("+1 415 555"), PhoneProblem::NotValid);
        assert!(matches!(problem("+999 1234567"), PhoneProblem::NotANumber(_)));
        assert!(matches!(problem("+hello"), PhoneProblem::NotANumber(_)));
        assert!(matches!(problem(&format!("+1{}", "5".repeat(80))), PhoneProblem::NotANumber(_)));
        assert!(matches!(problem("+1 415 555 0101 ext. 2"), PhoneProblem::NotANumber(_)));
    }

    #[test]
    fn the_error_names_the_field_and_says_what_is_accepted() {
        let e = PhoneNumber::parse("phone", "12345").unwrap_err();
        let words = e.to_string();
        assert!(words.starts_with("phone: \"12345\" is not accepted: it has no country code"), "{words}");
        assert!(words.contains("+14155550101"), "{words}");
        let v = InvalidValue::from(e);
        assert_eq!((v.field, v.value.as_str()), ("phone", "12345"));
    }
}
