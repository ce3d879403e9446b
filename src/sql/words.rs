//! [`Words`]: the token cursor cellar's DDL is parsed with, over
//! sqlparser's tokenizer and parser helpers.

use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::Token;

pub(super) struct Words<'a> {
    pub(super) p: Parser<'a>,
    /// Parentheses open in the GC policy being parsed.
    pub(super) gc_depth: usize,
}

pub(super) type PResult<T> = Result<T, ParserError>;

impl<'a> Words<'a> {
    pub(super) fn peek_word(&self, w: &str) -> bool {
        matches!(&self.p.peek_token().token, Token::Word(x) if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w))
    }

    pub(super) fn word(&mut self, w: &str) -> bool {
        let found = self.peek_word(w);
        if found {
            self.p.next_token();
        }
        found
    }

    pub(super) fn words(&mut self, ws: &[&str]) -> bool {
        for (matched, w) in ws.iter().enumerate() {
            if !self.word(w) {
                // Back over the words taken, one token each: counting
                // positions instead would also count the whitespace and
                // comments before them, and stepping back over a leading
                // comment is past the start.
                for _ in 0..matched {
                    self.p.prev_token();
                }
                return false;
            }
        }
        true
    }

    pub(super) fn expect_word(&mut self, w: &str) -> PResult<()> {
        if self.word(w) {
            Ok(())
        } else {
            self.p.expected(w, self.p.peek_token())
        }
    }

    pub(super) fn ident(&mut self) -> PResult<String> {
        let ident = self.p.parse_identifier()?;
        Ok(if ident.quote_style.is_some() {
            ident.value
        } else {
            ident.value.to_ascii_lowercase()
        })
    }

    /// An option name: words joined by dots (`format.has_header`).
    pub(super) fn option_key(&mut self) -> PResult<String> {
        let mut key = self.p.parse_identifier()?.value.to_ascii_lowercase();
        while self.p.consume_token(&Token::Period) {
            key.push('.');
            key.push_str(&self.p.parse_identifier()?.value.to_ascii_lowercase());
        }
        Ok(key)
    }

    pub(super) fn string(&mut self) -> PResult<String> {
        self.p.parse_literal_string()
    }

    pub(super) fn uint(&mut self) -> PResult<u64> {
        self.p.parse_literal_uint()
    }

    pub(super) fn token(&mut self, t: Token) -> PResult<()> {
        self.p.expect_token(&t).map(|_| ())
    }

    pub(super) fn error<T>(&self, message: String) -> PResult<T> {
        Err(ParserError::ParserError(message))
    }
}
