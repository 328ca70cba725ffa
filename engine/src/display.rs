//! Texts rendered for people: markdown to HTML, code highlighted, and everything sanitised
//! before it leaves the server, so nothing a model or dataset wrote runs in a rater's browser.
//!
//! Markdown is CommonMark (pulldown-cmark) with tables, strikethrough and task lists; a fenced
//! block is highlighted in the language its fence names. The HTML then goes through ammonia's
//! allow-list: no script, no event handlers, no `javascript:` links, no style. Two choices go
//! beyond ammonia's defaults: images are dropped (a model's `![](https://…)` would make the
//! rater's browser fetch what the model chose) and links must be absolute (a relative link
//! would point into Arbiter itself). Highlighting is CSS classes prefixed `hl-`, the only
//! classes that survive.

use std::borrow::Cow;
use std::sync::LazyLock;

use arbiter_domain::annotation::shown::{text_format, ShownItem, ShownText, ShownTurn, TextFormat};
use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};
use syntect::html::{ClassStyle, ClassedHTMLGenerator};
use syntect::parsing::SyntaxSet;
use syntect::util::LinesWithEndings;

/// Code beyond this many bytes in one text is shown escaped but not highlighted: the grammars'
/// regular expressions cost milliseconds per kilobyte, and a rater's page must come up at once.
const MAX_HIGHLIGHTED_BYTES: usize = 64 * 1024;

/// The prefix of every highlighting class.
const CLASS_PREFIX: &str = "hl-";

/// The classes `style/` colours; the grammars' many others are dropped, which keeps the HTML
/// small, and no class a text brings survives.
const STYLED_CLASSES: &[&str] = &[
    "hl-code",
    "hl-comment",
    "hl-string",
    "hl-keyword",
    "hl-storage",
    "hl-constant",
    "hl-entity",
    "hl-function",
    "hl-support",
];

/// The bundled grammars, loaded once (a few milliseconds).
static SYNTAXES: LazyLock<SyntaxSet> = LazyLock::new(SyntaxSet::load_defaults_newlines);

/// The sanitiser, built once: ammonia's allow-list, less images, with task-list checkboxes,
/// absolute links only, and classes kept only when they are ours.
static SANITISER: LazyLock<ammonia::Builder<'static>> = LazyLock::new(|| {
    let mut builder = ammonia::Builder::default();
    builder
        .rm_tags(["img"])
        // Task-list boxes only: whatever an `<input>` says, it is a disabled checkbox, so a
        // model can put no field (a password box, a button) on the rater's page.
        .add_tags(["input"])
        .add_tag_attributes("input", ["checked"])
        .set_tag_attribute_value("input", "type", "checkbox")
        .set_tag_attribute_value("input", "disabled", "")
        .add_generic_attributes(["class"])
        .url_relative(ammonia::UrlRelative::Deny)
        .link_rel(Some("noopener noreferrer nofollow"))
        .attribute_filter(|element, attribute, value| match (element, attribute) {
            (_, "class") => {
                let ours: Vec<&str> = value
                    .split_whitespace()
                    .filter(|class| STYLED_CLASSES.contains(class))
                    .collect();
                (!ours.is_empty()).then(|| Cow::Owned(ours.join(" ")))
            }
            _ => Some(Cow::Borrowed(value)),
        });
    builder
});

/// A text with its HTML in the form [`text_format`] picks.
pub fn show_text(raw: &str, code_eval: bool) -> ShownText {
    let html = match text_format(raw, code_eval) {
        TextFormat::Markdown => markdown_html(raw),
        TextFormat::Code { language } => {
            sanitise(&code_block_html(raw, language, MAX_HIGHLIGHTED_BYTES).0)
        }
    };
    ShownText {
        raw: raw.to_string(),
        html,
    }
}

/// An item's texts rendered; `conversation` holds the messages when the model was sent more
/// than one, as `(role, content, images)`.
pub fn show_item(
    input: &str,
    conversation: Vec<(String, String, Vec<String>)>,
    target: &str,
    output: &str,
    code_eval: bool,
) -> ShownItem {
    ShownItem {
        input: show_text(input, code_eval),
        conversation: conversation
            .into_iter()
            .map(|(role, content, images)| ShownTurn {
                role,
                text: show_text(&content, code_eval),
                images,
            })
            .collect(),
        target: show_text(target, code_eval),
        output: show_text(output, code_eval),
    }
}

/// Markdown as sanitised HTML, fenced code highlighted.
pub fn markdown_html(markdown: &str) -> String {
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_FOOTNOTES;
    let mut events = Vec::new();
    // A code block's text arrives as one or more events between its start and end; it is
    // gathered and replaced by one highlighted block.
    let mut code: Option<(String, String)> = None;
    let mut highlighting_left = MAX_HIGHLIGHTED_BYTES;
    for event in Parser::new_ext(markdown, options) {
        match (event, code.as_mut()) {
            (Event::Start(Tag::CodeBlock(kind)), _) => {
                let language = match kind {
                    CodeBlockKind::Fenced(info) => {
                        info.split_whitespace().next().unwrap_or("").to_string()
                    }
                    CodeBlockKind::Indented => String::new(),
                };
                code = Some((language, String::new()));
            }
            (Event::Text(text), Some((_, body))) => body.push_str(&text),
            (Event::End(TagEnd::CodeBlock), Some(_)) => {
                let (language, body) = code.take().unwrap_or_default();
                let (html, highlighted) = code_block_html(&body, &language, highlighting_left);
                highlighting_left -= highlighted;
                events.push(Event::Html(html.into()));
            }
            (event, _) => events.push(event),
        }
    }
    let mut html = String::with_capacity(markdown.len() * 3 / 2);
    pulldown_cmark::html::push_html(&mut html, events.into_iter());
    sanitise(&html)
}

/// HTML through the allow-list.
pub fn sanitise(html: &str) -> String {
    SANITISER.clean(html).to_string()
}

/// A `<pre>` of code highlighted as `language` (a fence's name or extension, such as `python`,
/// `py` or `rust`), and the bytes highlighted (the budget it used); unknown languages and code
/// longer than `budget` bytes are escaped as they are.
fn code_block_html(code: &str, language: &str, budget: usize) -> (String, usize) {
    let syntax = (code.len() <= budget)
        .then(|| SYNTAXES.find_syntax_by_token(language))
        .flatten();
    let (body, used) = match syntax.and_then(|syntax| highlighted(code, syntax)) {
        Some(body) => (body, code.len()),
        None => (escaped(code), 0),
    };
    (
        format!("<pre class=\"{CLASS_PREFIX}code\"><code>{body}</code></pre>\n"),
        used,
    )
}

fn highlighted(code: &str, syntax: &syntect::parsing::SyntaxReference) -> Option<String> {
    let mut generator = ClassedHTMLGenerator::new_with_class_style(
        syntax,
        &SYNTAXES,
        ClassStyle::SpacedPrefixed {
            prefix: CLASS_PREFIX,
        },
    );
    for line in LinesWithEndings::from(code) {
        // The grammars are written for lines that end in a newline.
        let result = if line.ends_with('\n') {
            generator.parse_html_for_line_which_includes_newline(line)
        } else {
            generator.parse_html_for_line_which_includes_newline(&format!("{line}\n"))
        };
        // A grammar that fails on a line (a regex past its backtracking limit) leaves the
        // whole block plain rather than half-coloured.
        result.ok()?;
    }
    let mut html = generator.finalize();
    if !code.ends_with('\n') && html.ends_with('\n') {
        html.pop();
    }
    Some(html)
}

fn escaped(code: &str) -> String {
    let mut html = String::with_capacity(code.len() + code.len() / 8);
    // Writing to a String cannot fail.
    let _ = pulldown_cmark_escape::escape_html_body_text(&mut html, code);
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Everything that would run script, load something, or restyle the page, in the places a
    /// model's output or a dataset's input can put it.
    const PAYLOADS: &[&str] = &[
        "<script>window.__xss = 1</script>",
        "<img src=x onerror=\"window.__xss = 1\">",
        "<svg onload=\"window.__xss = 1\"></svg>",
        "<a href=\"javascript:window.__xss = 1\">click</a>",
        "[click](javascript:window.__xss=1)",
        "<iframe src=\"javascript:window.__xss = 1\"></iframe>",
        "<div onclick=\"window.__xss = 1\" style=\"position:fixed\">x</div>",
        "<details open ontoggle=\"window.__xss = 1\"><summary>s</summary></details>",
        "<math><mtext><table><mglyph><style><img src=x onerror=window.__xss=1>",
        "```\n</code></pre><script>window.__xss = 1</script>\n```",
        "```python\n\"</span><script>window.__xss = 1</script>\"\n```",
        "<object data=\"data:text/html,<script>window.__xss=1</script>\"></object>",
        "<form action=\"javascript:window.__xss=1\"><button>go</button></form>",
        "<style>body { display: none }</style>",
        "<base href=\"https://evil.example/\">",
        "<meta http-equiv=\"refresh\" content=\"0; url=https://evil.example/\">",
        "![tracker](https://evil.example/pixel.png)",
        "<input type=\"password\" name=\"p\" placeholder=\"Your password\">",
        "<button onclick=\"window.__xss = 1\">ok</button>",
    ];

    /// The tags of sanitised HTML as (name, attributes); text between them is escaped, so a
    /// `<` opens a tag and only a quoted attribute value can hold a `>`.
    fn tags(html: &str) -> Vec<(String, Vec<(String, String)>)> {
        let mut found = Vec::new();
        let mut rest = html;
        while let Some(open) = rest.find('<') {
            rest = &rest[open + 1..];
            let mut end = 0;
            let mut quote = None;
            for (at, c) in rest.char_indices() {
                match (quote, c) {
                    (None, '"' | '\'') => quote = Some(c),
                    (Some(q), c) if c == q => quote = None,
                    (None, '>') => {
                        end = at;
                        break;
                    }
                    _ => {}
                }
            }
            let inside = &rest[..end];
            rest = &rest[end..];
            let name: String = inside
                .trim_start_matches('/')
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            let mut attributes = Vec::new();
            let mut text = &inside[inside.find(char::is_whitespace).unwrap_or(inside.len())..];
            while let Some(equals) = text.find("=\"") {
                let key = text[..equals].trim().to_string();
                let value_end = text[equals + 2..]
                    .find('"')
                    .map_or(text.len(), |at| equals + 2 + at);
                attributes.push((key, text[equals + 2..value_end].to_string()));
                text = &text[(value_end + 1).min(text.len())..];
            }
            found.push((name.to_ascii_lowercase(), attributes));
        }
        found
    }

    /// No element that runs, loads or restyles anything, no handler, no style attribute, no
    /// link outside http(s) and mail, no class but ours.
    fn assert_inert(html: &str) {
        const ALLOWED: &[&str] = &[
            "p",
            "a",
            "em",
            "strong",
            "del",
            "code",
            "pre",
            "span",
            "table",
            "thead",
            "tbody",
            "tr",
            "th",
            "td",
            "ul",
            "ol",
            "li",
            "input",
            "blockquote",
            "h1",
            "h2",
            "h3",
            "h4",
            "h5",
            "h6",
            "hr",
            "br",
            "details",
            "summary",
            "div",
            "sup",
            "section",
        ];
        for (name, attributes) in tags(html) {
            assert!(
                ALLOWED.contains(&name.as_str()),
                "<{name}> survived in {html}"
            );
            if name == "input" {
                let has =
                    |key: &str, value: &str| attributes.iter().any(|(k, v)| k == key && v == value);
                assert!(has("type", "checkbox") && has("disabled", ""), "{html}");
            }
            for (key, value) in attributes {
                assert!(
                    !key.starts_with("on") && key != "style",
                    "{key} on <{name}> in {html}"
                );
                if key == "href" || key == "src" || key == "action" {
                    assert!(
                        value.starts_with("https://")
                            || value.starts_with("http://")
                            || value.starts_with("mailto:"),
                        "{key}={value} in {html}"
                    );
                }
                if key == "class" {
                    assert!(
                        value
                            .split(' ')
                            .all(|class| STYLED_CLASSES.contains(&class)),
                        "{value}"
                    );
                }
            }
        }
    }

    /// The text a browser shows for sanitised HTML: tags removed, entities decoded.
    fn text_of(html: &str) -> String {
        let mut text = String::new();
        let mut in_tag = false;
        for c in html.chars() {
            match c {
                '<' => in_tag = true,
                '>' if in_tag => in_tag = false,
                c if !in_tag => text.push(c),
                _ => {}
            }
        }
        text.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&amp;", "&")
    }

    #[test]
    fn no_payload_survives_in_any_form() {
        for payload in PAYLOADS {
            assert_inert(&markdown_html(payload));
            assert_inert(&show_text(payload, true).html);
            // Inside a table, a list and a fenced block of another language.
            assert_inert(&markdown_html(&format!("| a |\n|---|\n| {payload} |")));
            assert_inert(&markdown_html(&format!("- {payload}")));
            assert_inert(&markdown_html(&format!("```rust\n{payload}\n```")));
        }
    }

    #[test]
    fn escaped_payloads_stay_readable_as_text() {
        // Code shows the payload as the characters it is, not as nothing.
        for payload in PAYLOADS {
            let shown = show_text(payload, true);
            if !payload.contains("```") {
                assert_eq!(text_of(&shown.html).trim_end(), *payload, "{}", shown.html);
            }
            assert_eq!(shown.raw, *payload);
        }
    }

    #[test]
    fn markdown_renders_tables_lists_and_emphasis() {
        let html = markdown_html(
            "**bold** and *it* and ~~gone~~\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n- one\n- two\n\ntasks:\n\n- [x] done\n",
        );
        for expected in [
            "<strong>bold</strong>",
            "<em>it</em>",
            "<del>gone</del>",
            "<table>",
            "<td>1</td>",
            "<li>one</li>",
            "type=\"checkbox\"",
        ] {
            assert!(html.contains(expected), "`{expected}` missing in {html}");
        }
    }

    #[test]
    fn links_are_absolute_and_do_not_pass_the_referrer() {
        let html = markdown_html("[docs](https://example.org/a) and [home](/runs/1)");
        assert!(html.contains("href=\"https://example.org/a\""), "{html}");
        assert!(
            html.contains("rel=\"noopener noreferrer nofollow\""),
            "{html}"
        );
        assert!(!html.contains("/runs/1\""), "{html}");
    }

    #[test]
    fn fenced_code_is_highlighted_in_its_language() {
        let html = markdown_html("```python\ndef add(a, b):\n    return a + b  # sum\n```\n");
        assert!(html.starts_with("<pre class=\"hl-code\"><code>"), "{html}");
        assert!(html.contains("hl-keyword"), "{html}");
        assert!(html.contains("hl-comment"), "{html}");
        // Unknown languages and indented blocks are escaped, not lost.
        let plain = markdown_html("```klingon\na < b\n```\n");
        assert!(plain.contains("a &lt; b"), "{plain}");
        let indented = markdown_html("text\n\n    x = 1 < 2\n");
        assert!(indented.contains("x = 1 &lt; 2"), "{indented}");
    }

    #[test]
    fn code_evals_show_their_prompts_as_code() {
        let shown = show_text("def f():\n    \"\"\"__init__ # not a heading\"\"\"\n", true);
        assert!(!shown.html.contains("<h1>"), "{}", shown.html);
        assert!(!shown.html.contains("<strong>"), "{}", shown.html);
        assert!(shown.html.contains("hl-"), "{}", shown.html);
        let prose = show_text("# Title\n\n__init__", false);
        assert!(prose.html.contains("<h1>Title</h1>"), "{}", prose.html);
    }

    #[test]
    fn classes_from_the_text_are_dropped() {
        let html = markdown_html(
            "<span class=\"pass hl-comment hl-x\">a</span> <p class=\"notice\">b</p>",
        );
        assert!(
            html.contains("<span class=\"hl-comment\">a</span>"),
            "{html}"
        );
        assert!(html.contains("<p>b</p>"), "{html}");
    }

    #[test]
    fn long_code_is_escaped_without_highlighting() {
        let code = "x = '<'\n".repeat(MAX_HIGHLIGHTED_BYTES / 8 + 1);
        let (html, used) = code_block_html(&code, "python", MAX_HIGHLIGHTED_BYTES);
        assert_eq!(used, 0);
        assert!(
            !html.contains("hl-keyword") && !html.contains("<span"),
            "highlighted"
        );
        // The budget is per text: two blocks of half of it each, and the third is plain.
        let block = format!(
            "```python\n{}```\n",
            "def f(): pass\n".repeat(MAX_HIGHLIGHTED_BYTES / 28)
        );
        let three = markdown_html(&format!("{block}\n{block}\n{block}"));
        assert_eq!(three.matches("<pre").count(), 3);
        let last = three.rsplit("<pre").next().unwrap();
        assert!(
            !last.contains("hl-storage"),
            "the third block is highlighted"
        );
        assert!(three.split("<pre").nth(1).unwrap().contains("hl-storage"));
        // Code that was not highlighted (an unknown language) costs none of the budget.
        let unknown = block.replace("```python", "```klingon");
        let mixed = markdown_html(&format!("{unknown}\n{unknown}\n{unknown}\n{block}"));
        assert!(mixed.rsplit("<pre").next().unwrap().contains("hl-storage"));
        assert!(
            !html.contains("hl-keyword") && !html.contains("<span"),
            "highlighted"
        );
        assert!(html.contains("x = '&lt;'"));
    }
}
