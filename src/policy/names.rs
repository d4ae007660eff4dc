//! What a name may hold. Names are read by people (in `status`, in cron
//! mail, in a pause), so one name must never look like another: a
//! character that is drawn as nothing, that reorders the line it is shown
//! in, or that means nothing yet (unassigned) or only by private agreement
//! (private use) is never part of a new name, and is escaped wherever text
//! from the store is shown (`report::escape`).

use super::unicode;

/// Why a character cannot be part of a name, nor be shown as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hidden {
    /// Bidirectional overrides, embeddings, isolates and marks, zero-width
    /// characters and the line and paragraph separators: they hide text or
    /// reorder or break the line.
    BidiOrZeroWidth,
    /// Any other Default_Ignorable_Code_Point (U+00AD, variation
    /// selectors, Hangul fillers, tags...): drawn as nothing.
    Ignorable,
    /// A code point the Unicode version of `unicode::VERSION` assigns no
    /// character (noncharacters included).
    Unassigned,
    /// A private-use character: drawn differently on every screen.
    PrivateUse,
}

impl Hidden {
    /// What the character is, for the line that refuses it.
    pub fn what(self) -> String {
        match self {
            Hidden::BidiOrZeroWidth => {
                "a bidirectional or zero-width character that hides or reorders text".into()
            }
            Hidden::Ignorable => {
                "an invisible (default-ignorable) character that makes one name look like \
                 another"
                    .into()
            }
            Hidden::Unassigned => format!(
                "a code point Unicode {} assigns no character",
                unicode::VERSION
            ),
            Hidden::PrivateUse => {
                "a private-use character, drawn differently on every screen".into()
            }
        }
    }
}

fn within(table: &[(u32, u32)], c: char) -> bool {
    let c = c as u32;
    table
        .binary_search_by(|&(lo, hi)| {
            if hi < c {
                std::cmp::Ordering::Less
            } else if lo > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// Whether `c` cannot be seen for what it is, and why: the one rule for
/// new names (and pause tags) and for the text shown escaped.
pub fn hidden(c: char) -> Option<Hidden> {
    let bidi_or_zero_width = matches!(
        c,
        '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2069}'
            | '\u{061C}'
            | '\u{FEFF}'
            | '\u{2028}'
            | '\u{2029}'
    );
    if bidi_or_zero_width {
        Some(Hidden::BidiOrZeroWidth)
    } else if within(unicode::DEFAULT_IGNORABLE, c) {
        Some(Hidden::Ignorable)
    } else if within(unicode::PRIVATE_USE, c) {
        Some(Hidden::PrivateUse)
    } else if within(unicode::UNASSIGNED, c) {
        Some(Hidden::Unassigned)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_are_sorted_and_disjoint() {
        for t in [
            unicode::DEFAULT_IGNORABLE,
            unicode::PRIVATE_USE,
            unicode::UNASSIGNED,
        ] {
            assert!(t.iter().all(|(lo, hi)| lo <= hi));
            assert!(t.windows(2).all(|w| w[0].1 + 1 < w[1].0), "{t:?}");
        }
    }

    #[test]
    fn what_cannot_be_seen_is_hidden() {
        let cases = [
            ('\u{202E}', Some(Hidden::BidiOrZeroWidth)),
            ('\u{200B}', Some(Hidden::BidiOrZeroWidth)),
            ('\u{2029}', Some(Hidden::BidiOrZeroWidth)),
            ('\u{FEFF}', Some(Hidden::BidiOrZeroWidth)),
            // The list, beyond bidi and zero-width.
            ('\u{00AD}', Some(Hidden::Ignorable)),
            ('\u{034F}', Some(Hidden::Ignorable)),
            ('\u{115F}', Some(Hidden::Ignorable)),
            ('\u{1160}', Some(Hidden::Ignorable)),
            ('\u{17B4}', Some(Hidden::Ignorable)),
            ('\u{17B5}', Some(Hidden::Ignorable)),
            ('\u{180B}', Some(Hidden::Ignorable)),
            ('\u{180F}', Some(Hidden::Ignorable)),
            ('\u{3164}', Some(Hidden::Ignorable)),
            ('\u{FE00}', Some(Hidden::Ignorable)),
            ('\u{FE0F}', Some(Hidden::Ignorable)),
            ('\u{FFA0}', Some(Hidden::Ignorable)),
            ('\u{1D173}', Some(Hidden::Ignorable)),
            ('\u{1D17A}', Some(Hidden::Ignorable)),
            ('\u{E0001}', Some(Hidden::Ignorable)),
            ('\u{E0FFF}', Some(Hidden::Ignorable)),
            ('\u{E000}', Some(Hidden::PrivateUse)),
            ('\u{10FFFD}', Some(Hidden::PrivateUse)),
            ('\u{0378}', Some(Hidden::Unassigned)),
            ('\u{FFFF}', Some(Hidden::Unassigned)),
            ('\u{FDD0}', Some(Hidden::Unassigned)),
            ('\u{10FFFF}', Some(Hidden::Unassigned)),
            // Names people write.
            ('a', None),
            ('.', None),
            (' ', None),
            ('é', None),
            ('日', None),
            ('\u{1F600}', None),
            ('\u{0301}', None),
        ];
        for (c, want) in cases {
            assert_eq!(hidden(c), want, "U+{:04X}", c as u32);
        }
    }
}
