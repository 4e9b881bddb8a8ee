//! Quoting for POSIX shells, so a printed command or a generated script can be pasted or run
//! whatever a path holds (spaces, quotes, `$(…)`).

/// `s` as one shell word: unchanged when it holds only characters no shell treats specially,
/// else in single quotes (a single quote inside written as `'\''`).
pub fn quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Words joined into one command line, each quoted as needed.
pub fn join<S: AsRef<str>>(words: impl IntoIterator<Item = S>) -> String {
    words
        .into_iter()
        .map(|w| quote(w.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_that_a_shell_would_split_or_expand_are_quoted() {
        assert_eq!(quote("reports/x.slurm"), "reports/x.slurm");
        assert_eq!(quote("my results"), "'my results'");
        assert_eq!(quote("$(rm -rf ~)"), "'$(rm -rf ~)'");
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(quote(""), "''");
        assert_eq!(
            join(["loaderlab", "merge", "a b/runs"]),
            "loaderlab merge 'a b/runs'"
        );
    }

    #[test]
    fn a_quoted_word_reaches_the_shell_unchanged() {
        for word in ["a b", "$(echo no)", "it's", "`x`", "*", "tab\there"] {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf %s {}", quote(word)))
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout), word);
        }
    }
}
