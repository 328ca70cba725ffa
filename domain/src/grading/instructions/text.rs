//! How the instruction checks read a response: words, sentences, capitalised words, letter case
//! and language, each as IFEval's reference implementation (in lm-evaluation-harness) reads
//! them, so the same response gets the same verdict here and there.

use std::sync::LazyLock;

use regex::Regex;

/// Words as the reference counts them (NLTK's `RegexpTokenizer(r"\w+")`): runs of letters,
/// digits and underscores. Python's `\w` is letters and numbers, not combining marks, so a
/// word breaks at a mark as it does there.
pub fn count_words(text: &str) -> usize {
    static WORD: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"[\p{L}\p{N}_]+").expect("the word pattern compiles"));
    WORD.find_iter(text).count()
}

/// Python's `str.isupper`: some cased character, and no lower-case one.
pub fn is_upper(text: &str) -> bool {
    text.chars().any(char::is_uppercase) && !text.chars().any(char::is_lowercase)
}

/// Python's `str.islower`: some cased character, and no upper-case one.
pub fn is_lower(text: &str) -> bool {
    text.chars().any(char::is_lowercase) && !text.chars().any(char::is_uppercase)
}

/// How many words are written in capitals (`isupper`), with words split as NLTK's
/// `word_tokenize` splits them where it matters for case: at whitespace, at punctuation that
/// is its own token, and before an English clitic (`DON'T` is `DO` and `N'T`, two words in
/// capitals). Hyphenated words stay one word.
pub fn count_capitalised_words(text: &str) -> usize {
    text.split_whitespace()
        .flat_map(|chunk| chunk.split(is_token_punctuation))
        .flat_map(|part| part.split("..."))
        .flat_map(|part| part.split("--"))
        // A final full stop is its own token, so a clitic before it still splits off.
        .map(|part| part.trim_end_matches('.'))
        .flat_map(split_clitic)
        .filter(|word| is_upper(word))
        .count()
}

/// Punctuation that the Treebank tokenizer always makes a token of its own (a token without
/// letters is never "in capitals", so only where it splits words matters).
fn is_token_punctuation(c: char) -> bool {
    matches!(
        c,
        ',' | ';'
            | ':'
            | '@'
            | '#'
            | '$'
            | '%'
            | '&'
            | '?'
            | '!'
            | '('
            | ')'
            | '['
            | ']'
            | '{'
            | '}'
            | '<'
            | '>'
            | '"'
            | '`'
            | '“'
            | '”'
    )
}

/// `word` with an English clitic split off (`can't` → `ca`, `n't`; `it's` → `it`, `'s`).
fn split_clitic(word: &str) -> impl Iterator<Item = &str> {
    let lower = word.to_lowercase();
    let clitic_len = ["n't", "'s", "'m", "'d", "'ll", "'re", "'ve"]
        .into_iter()
        .find(|clitic| lower.ends_with(clitic) && lower.len() > clitic.len())
        .map(str::len)
        // Lower-casing can change lengths outside ASCII; the clitics are ASCII, so their
        // length at the end of `word` is the same.
        .filter(|len| word.is_char_boundary(word.len() - len));
    let (head, tail) = match clitic_len {
        Some(len) => word.split_at(word.len() - len),
        None => (word, ""),
    };
    [head, tail].into_iter().filter(|part| !part.is_empty())
}

/// The number of sentences, read as the Punkt sentence tokenizer (NLTK's English model, which
/// the reference uses) reads them where it matters for counting: a sentence ends at `?` or
/// `!`, and at a full stop unless the word before it is a common abbreviation (`Dr.`,
/// `U.S.`), an initial or a list number followed by a word in lower case, or an ellipsis
/// within a sentence. Line breaks alone do not end sentences. Punkt also weighs evidence from
/// its training corpus about which words start sentences; that evidence is not reproduced, so
/// rare abbreviations and initials can be counted differently.
pub fn count_sentences(text: &str) -> usize {
    let chunks: Vec<&str> = text.split_whitespace().collect();
    let mut sentences = 0;
    let mut in_sentence = false;
    for (index, chunk) in chunks.iter().enumerate() {
        in_sentence = true;
        let next = chunks.get(index + 1).copied();
        if ends_sentence(chunk, next) {
            sentences += 1;
            in_sentence = false;
        }
    }
    sentences + usize::from(in_sentence)
}

/// Whether a sentence ends with `chunk` (a run of non-whitespace), given the chunk after it.
fn ends_sentence(chunk: &str, next: Option<&str>) -> bool {
    let core = chunk.trim_end_matches(is_closing);
    let Some(next) = next else {
        // The last chunk ends the last sentence whatever it ends with.
        return false;
    };
    if core.ends_with(['?', '!']) {
        return true;
    }
    if !core.ends_with('.') {
        return false;
    }
    let next_word = next.trim_start_matches(is_opening);
    let next_upper = next_word.chars().next().is_some_and(char::is_uppercase);
    let next_lower = next_word.chars().next().is_some_and(char::is_lowercase);
    let starts_a_sentence = next_upper && is_frequent_sentence_starter(next_word);
    if core.ends_with("..") || core.ends_with('…') {
        // An ellipsis ends a sentence only before a word that usually starts one.
        return starts_a_sentence;
    }
    let word = core
        .trim_end_matches('.')
        .trim_start_matches(is_opening)
        .to_lowercase();
    if word.is_empty() {
        // A full stop standing alone.
        return true;
    }
    let last_part = word.rsplit('-').next().unwrap_or(&word);
    if is_abbreviation(&word) || is_abbreviation(last_part) {
        return starts_a_sentence;
    }
    let is_initial = {
        let mut chars = word.chars();
        chars.next().is_some_and(char::is_alphabetic) && chars.next().is_none()
    };
    if is_initial {
        // `J. Smith`: a capitalised word after an initial is usually a name; `a. b` goes on.
        return if next_upper {
            starts_a_sentence
        } else {
            !next_lower
        };
    }
    let is_number = word.chars().any(|c| c.is_ascii_digit())
        && word
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | ',' | '-'));
    if is_number {
        // `1. apples` continues; `1. Apples` (a numbered list) ends one.
        return !next_lower;
    }
    true
}

fn is_closing(c: char) -> bool {
    matches!(
        c,
        ')' | '"' | '\'' | ';' | '}' | ']' | '*' | ':' | '@' | '”' | '’' | '»'
    )
}

fn is_opening(c: char) -> bool {
    matches!(
        c,
        '(' | '"' | '\'' | '[' | '{' | '*' | '`' | '“' | '‘' | '«' | '-' | '#'
    )
}

/// Abbreviations after which a full stop rarely ends an English sentence (lower case, without
/// the final full stop).
fn is_abbreviation(word: &str) -> bool {
    const ABBREVIATIONS: &[&str] = &[
        // Titles and ranks.
        "mr", "mrs", "ms", "messrs", "dr", "prof", "rev", "gen", "col", "lt", "maj", "capt", "sgt",
        "adm", "gov", "sen", "rep", "reps", "jr", "sr", // Companies and places.
        "inc", "corp", "co", "cos", "ltd", "bros", "st", "ave", "mt", "ft",
        // Months and days.
        "jan", "feb", "aug", "sep", "sept", "oct", "nov", "dec", "tues", "wed", "fri",
        // States and countries, as American newswire (Punkt's English corpus) writes them.
        "ala", "ariz", "calif", "colo", "conn", "fla", "ga", "ill", "kan", "ky", "mich", "minn",
        "nev", "okla", "ore", "pa", "tenn", "va", "vt", "wash", "wis", "n.y", "n.j", "n.c", "n.h",
        "n.m", "d.c", "l.a", "u.s", "u.s.a", "u.k", "u.n", "u.s.s.r",
        // Times, degrees and the rest.
        "a.m", "p.m", "ph.d", "m.b.a", "vs", "yr", "ok",
    ];
    // Not `e.g` or `i.e`: Punkt's English model ends sentences after them.
    ABBREVIATIONS.contains(&word)
}

/// Words that usually begin a sentence when capitalised after an abbreviation or ellipsis.
fn is_frequent_sentence_starter(word: &str) -> bool {
    let word: String = word
        .chars()
        .take_while(|c| c.is_alphabetic())
        .collect::<String>()
        .to_lowercase();
    matches!(
        word.as_str(),
        "the"
            | "this"
            | "these"
            | "they"
            | "there"
            | "it"
            | "he"
            | "she"
            | "we"
            | "i"
            | "in"
            | "if"
            | "but"
            | "however"
            | "when"
            | "while"
            | "although"
            | "since"
            | "so"
            | "thus"
            | "yet"
            | "some"
            | "many"
            | "most"
            | "both"
            | "according"
            | "meanwhile"
            | "moreover"
    )
}

/// ISO 639-1 codes (as IFEval's items and langdetect name languages) of the languages the
/// detector knows, with its ISO 639-3 ones; Chinese is `zh-cn` or `zh-tw`, and Norwegian `no`, as
/// langdetect names them.
const LANGUAGE_CODES: &[(&str, &str)] = &[
    ("af", "afr"),
    ("ak", "aka"),
    ("am", "amh"),
    ("ar", "ara"),
    ("az", "aze"),
    ("be", "bel"),
    ("bg", "bul"),
    ("bn", "ben"),
    ("ca", "cat"),
    ("cs", "ces"),
    ("cy", "cym"),
    ("da", "dan"),
    ("de", "deu"),
    ("el", "ell"),
    ("en", "eng"),
    ("eo", "epo"),
    ("es", "spa"),
    ("et", "est"),
    ("fa", "pes"),
    ("fi", "fin"),
    ("fr", "fra"),
    ("gu", "guj"),
    ("he", "heb"),
    ("hi", "hin"),
    ("hr", "hrv"),
    ("hu", "hun"),
    ("hy", "hye"),
    ("id", "ind"),
    ("it", "ita"),
    ("ja", "jpn"),
    ("jv", "jav"),
    ("ka", "kat"),
    ("km", "khm"),
    ("kn", "kan"),
    ("ko", "kor"),
    ("la", "lat"),
    ("lt", "lit"),
    ("lv", "lav"),
    ("mk", "mkd"),
    ("ml", "mal"),
    ("mr", "mar"),
    ("my", "mya"),
    ("ne", "nep"),
    ("nl", "nld"),
    ("no", "nob"),
    ("or", "ori"),
    ("pa", "pan"),
    ("pl", "pol"),
    ("pt", "por"),
    ("ro", "ron"),
    ("ru", "rus"),
    ("si", "sin"),
    ("sk", "slk"),
    ("sl", "slv"),
    ("sn", "sna"),
    ("sr", "srp"),
    ("sv", "swe"),
    ("ta", "tam"),
    ("te", "tel"),
    ("th", "tha"),
    ("tk", "tuk"),
    ("tl", "tgl"),
    ("tr", "tur"),
    ("uk", "ukr"),
    ("ur", "urd"),
    ("uz", "uzb"),
    ("vi", "vie"),
    ("yi", "yid"),
    ("zh-cn", "cmn"),
    ("zh-tw", "cmn"),
    ("zu", "zul"),
];

/// Languages the reference's detector (langdetect) reads but this one has no profile for:
/// Somali, Albanian and Swahili (which IFEval asks for). A response cannot be checked against
/// them here, and counts as followed, as the reference counts text its detector cannot read.
const UNDETECTABLE: [&str; 3] = ["so", "sq", "sw"];

/// The ISO 639-1 codes an item may ask for, for messages.
pub fn known_languages() -> Vec<&'static str> {
    let mut codes: Vec<&str> = LANGUAGE_CODES.iter().map(|(code, _)| *code).collect();
    codes.extend(UNDETECTABLE);
    codes.sort_unstable();
    codes
}

/// Whether an item may ask for `code`: a language neither detector knows could never be
/// checked, so an item asking for one is refused.
pub fn is_known_language(code: &str) -> bool {
    LANGUAGE_CODES.iter().any(|(known, _)| *known == code) || UNDETECTABLE.contains(&code)
}

/// Whether `text` reads as the language `code` (ISO 639-1); `None` when it cannot be told:
/// the detector finds no script to go on, or has no profile for the language.
#[cfg(not(target_arch = "wasm32"))]
pub fn reads_as(text: &str, code: &str) -> Option<bool> {
    if UNDETECTABLE.contains(&code) {
        return None;
    }
    let found = whatlang::detect(text)?.lang().code();
    Some(
        LANGUAGE_CODES
            .iter()
            .any(|(iso1, iso3)| *iso1 == code && *iso3 == found),
    )
}

/// Graders never run in the browser, which does not carry the language profiles.
#[cfg(target_arch = "wasm32")]
pub fn reads_as(_text: &str, _code: &str) -> Option<bool> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_runs_of_letters_digits_and_underscores() {
        assert_eq!(count_words("Hello, world! It's 2024_v2."), 5);
        assert_eq!(count_words("  "), 0);
        assert_eq!(count_words("naïve café"), 2);
    }

    #[test]
    fn case_follows_python() {
        assert!(is_upper("HELLO, WORLD 42"));
        assert!(!is_upper("Hello"));
        assert!(!is_upper("42 !"));
        assert!(is_lower("hello, world 42"));
        assert!(!is_lower("hello World"));
        assert!(!is_lower("..."));
    }

    #[test]
    fn capitalised_words_split_clitics_and_punctuation() {
        assert_eq!(count_capitalised_words("I DON'T KNOW"), 4);
        assert_eq!(count_capitalised_words("WAIT,STOP and Go"), 2);
        assert_eq!(count_capitalised_words("STATE-OF-THE-ART **BOLD** 123"), 2);
        assert_eq!(count_capitalised_words("Hello there"), 0);
        // As NLTK counts them: a final full stop, `...` and `--` are tokens of their own.
        assert_eq!(count_capitalised_words("I DON'T."), 3);
        assert_eq!(count_capitalised_words("THAT'S IT. IT'S."), 5);
        assert_eq!(count_capitalised_words("WELL...I THINK"), 3);
        assert_eq!(count_capitalised_words("HELLO--WORLD"), 2);
    }

    #[test]
    fn sentences_end_at_terminal_punctuation_not_at_abbreviations() {
        assert_eq!(count_sentences("One. Two? Three!"), 3);
        assert_eq!(count_sentences("Dr. Smith went home. He slept."), 2);
        assert_eq!(count_sentences("See e.g. the index. Done"), 3);
        assert_eq!(
            count_sentences("He lives in the U.S. He works in N.Y. as a teacher."),
            2
        );
        assert_eq!(count_sentences("line one\nline two"), 1);
        assert_eq!(count_sentences("Really?! Yes."), 2);
        assert_eq!(count_sentences("\"Quoted.\" Next one."), 2);
        assert_eq!(count_sentences("1. Apples\n2. Pears"), 3);
        assert_eq!(count_sentences("Wait... what happened?"), 1);
        assert_eq!(count_sentences(""), 0);
        assert_eq!(count_sentences("   \n "), 0);
    }

    #[test]
    fn languages_are_named_by_their_iso_639_1_codes() {
        let english = "The quick brown fox jumps over the lazy dog near the river bank.";
        assert_eq!(reads_as(english, "en"), Some(true));
        assert_eq!(reads_as(english, "de"), Some(false));
        let german = "Der schnelle braune Fuchs springt über den faulen Hund am Fluss.";
        assert_eq!(reads_as(german, "de"), Some(true));
        assert_eq!(
            reads_as("委员会周二开会审查预算。大家都同意了。", "zh-cn"),
            Some(true)
        );
        assert_eq!(reads_as("12345 !!!", "en"), None);
        assert!(is_known_language("ja") && !is_known_language("xx") && !is_known_language("zh"));
        // Swahili is in IFEval's list, but this detector cannot read it: not told.
        assert!(is_known_language("sw"));
        assert_eq!(
            reads_as("Habari ya asubuhi, rafiki yangu mpendwa.", "sw"),
            None
        );
    }
}
