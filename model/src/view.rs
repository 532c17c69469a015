//! Model states and actions in a reviewer's words, one vocabulary for every place a reviewer
//! reads them: the Explorer (each model's `format_action` / `format_step` / `as_svg` delegate
//! here), the HTML report's step-by-step changes, and the CLI.
//!
//! A state is shown by role: one entry per top-level field, and a list of actors split into one
//! entry per actor named as the CLI names it (`writers` -> `W1`, `W2`; `pullers` -> `P1`;
//! `clients` -> `C1`), so "what changed at this step" is a short list of roles. Actors are
//! numbered from 1 everywhere a reviewer reads them; only ITF files keep 0-based indexes.
//!
//! Invariants: pure functions of their input (no I/O); every text is escaped before it goes
//! into SVG.

use crate::check::{ModelSpec, PropertyDef};
use std::fmt::Debug;
use std::hash::Hash;

/// The name of the `index`th (0-based) element of a list field, as the CLI names actors:
/// `writers`, 0 -> `W1`; a field that holds no actors -> `name[index]`.
pub fn element_name(field: &str, index: usize) -> String {
    match field {
        "writers" => format!("W{}", index + 1),
        "pullers" => format!("P{}", index + 1),
        "clients" => format!("C{}", index + 1),
        _ => format!("{field}[{index}]"),
    }
}

/// A value as Rust's derived `Debug` prints it, parsed back into its shape.
#[derive(Debug, Clone, PartialEq)]
enum Shape {
    /// `Name { field: value, .. }`
    Struct(String, Vec<(String, Shape)>),
    /// `[a, b]`
    List(Vec<Shape>),
    /// `{k: v, ..}` (a map) or `{a, b}` (a set, values only)
    Map(Vec<(Option<Shape>, Shape)>),
    /// `Name(a, b)`
    Tuple(String, Vec<Shape>),
    /// A number, a unit variant, a string literal.
    Atom(String),
}

struct Parser<'a> {
    text: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn skip_spaces(&mut self) {
        while self.at < self.text.len() && self.text[self.at] == b' ' {
            self.at += 1;
        }
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_spaces();
        if self.text[self.at..].starts_with(token.as_bytes()) {
            self.at += token.len();
            true
        } else {
            false
        }
    }

    fn word(&mut self) -> String {
        self.skip_spaces();
        let start = self.at;
        if self.at < self.text.len() && self.text[self.at] == b'"' {
            self.at += 1;
            while self.at < self.text.len() && self.text[self.at] != b'"' {
                self.at += if self.text[self.at] == b'\\' { 2 } else { 1 };
            }
            self.at = (self.at + 1).min(self.text.len());
        } else {
            while self.at < self.text.len() && !b" ,:{}[]()".contains(&self.text[self.at]) {
                self.at += 1;
            }
        }
        String::from_utf8_lossy(&self.text[start..self.at]).to_string()
    }

    fn items(&mut self, close: &str) -> Vec<Shape> {
        let mut items = Vec::new();
        while !self.eat(close) {
            if self.at >= self.text.len() {
                break;
            }
            items.push(self.value());
            self.eat(",");
        }
        items
    }

    fn value(&mut self) -> Shape {
        self.skip_spaces();
        if self.eat("[") {
            return Shape::List(self.items("]"));
        }
        if self.eat("{") {
            let mut entries = Vec::new();
            while !self.eat("}") {
                if self.at >= self.text.len() {
                    break;
                }
                let first = self.value();
                if self.eat(":") {
                    entries.push((Some(first), self.value()));
                } else {
                    entries.push((None, first));
                }
                self.eat(",");
            }
            return Shape::Map(entries);
        }
        if self.eat("(") {
            return Shape::Tuple(String::new(), self.items(")"));
        }
        let name = self.word();
        if self.eat("{") {
            let mut fields = Vec::new();
            while !self.eat("}") {
                if self.at >= self.text.len() {
                    break;
                }
                let field = self.word();
                self.eat(":");
                fields.push((field, self.value()));
                self.eat(",");
            }
            return Shape::Struct(name, fields);
        }
        if self.eat("(") {
            return Shape::Tuple(name, self.items(")"));
        }
        if name.is_empty() {
            // Nothing this parser knows: take one character so parsing always ends.
            self.at += 1;
        }
        Shape::Atom(name)
    }
}

/// A shape back in one line, as compact as `Debug` prints it.
fn render(shape: &Shape) -> String {
    let join = |items: &[Shape]| items.iter().map(render).collect::<Vec<_>>().join(", ");
    match shape {
        Shape::Atom(text) => text.clone(),
        Shape::List(items) => format!("[{}]", join(items)),
        Shape::Tuple(name, items) => format!("{name}({})", join(items)),
        Shape::Struct(name, fields) => {
            let fields: Vec<String> = fields
                .iter()
                .map(|(field, value)| format!("{field}: {}", render(value)))
                .collect();
            format!("{name} {{ {} }}", fields.join(", "))
        }
        Shape::Map(entries) => {
            let entries: Vec<String> = entries
                .iter()
                .map(|(key, value)| match key {
                    Some(key) => format!("{}: {}", render(key), render(value)),
                    None => render(value),
                })
                .collect();
            format!("{{{}}}", entries.join(", "))
        }
    }
}

/// Flattens a shape into roles: struct fields and list elements are followed (lists of actors
/// named as the CLI names them), maps are split per key, anything else is one role. `role` is
/// this value's role, `field` the field name it sits in.
fn flatten(role: &str, field: &str, shape: &Shape, depth: usize, out: &mut Vec<(String, String)>) {
    match shape {
        Shape::Struct(_, fields) if depth < 3 && !fields.is_empty() => {
            for (name, value) in fields {
                flatten(&format!("{role}.{name}"), name, value, depth + 1, out);
            }
        }
        Shape::List(items) if depth < 3 && !items.is_empty() => {
            for (index, item) in items.iter().enumerate() {
                let name = element_name(field, index);
                let element = if name.contains('[') {
                    format!("{role}[{index}]")
                } else {
                    match role.rsplit_once('.') {
                        Some((parent, _)) => format!("{parent}.{name}"),
                        None => name,
                    }
                };
                flatten(&element, "", item, depth + 1, out);
            }
        }
        Shape::Map(entries)
            if depth < 3 && !entries.is_empty() && entries.iter().all(|(key, _)| key.is_some()) =>
        {
            for (key, value) in entries {
                let key = key.as_ref().map(render).unwrap_or_default();
                out.push((format!("{role}[{key}]"), render(value)));
            }
        }
        _ => out.push((role.to_string(), render(shape))),
    }
}

/// The state by role, one `(role, value)` per leaf: struct fields by name (`table.pending`),
/// actors as the CLI names them (`W1.phase`, `C2.stage`), map entries by key
/// (`answers[0]`). Built from the state's Debug form, so every model has it without a
/// per-model encoder; what changes at a step is then a short list of roles.
pub fn roles<T: Debug>(state: &T) -> Vec<(String, String)> {
    let text = format!("{state:?}");
    let mut parser = Parser {
        text: text.as_bytes(),
        at: 0,
    };
    let shape = parser.value();
    let mut out = Vec::new();
    match &shape {
        Shape::Struct(_, fields) => {
            for (name, value) in fields {
                flatten(name, name, value, 1, &mut out);
            }
        }
        other => out.push(("state".to_string(), render(other))),
    }
    out
}

/// A role whose value differs between two states: `(role, before, after)`; `None` when the
/// role is absent on that side.
pub type Change = (String, Option<String>, Option<String>);

/// The roles that changed from `before` to `after`, in the order of `after` (then removed ones).
pub fn changes(before: &[(String, String)], after: &[(String, String)]) -> Vec<Change> {
    let mut out = Vec::new();
    for (role, value) in after {
        match before.iter().find(|(known, _)| known == role) {
            Some((_, old)) if old == value => {}
            Some((_, old)) => out.push((role.clone(), Some(old.clone()), Some(value.clone()))),
            None => out.push((role.clone(), None, Some(value.clone()))),
        }
    }
    for (role, value) in before {
        // An empty map that gained entries is shown by its entries, not as removed.
        let split = |known: &String| known.starts_with(&format!("{role}["));
        if !after.iter().any(|(known, _)| known == role || split(known)) {
            out.push((role.clone(), Some(value.clone()), None));
        }
    }
    out
}

/// An action in the reviewer's words from its Debug form, actors numbered as the CLI numbers
/// them and no Rust syntax left: `WriterSendsRound { writer: 0 }` -> `WriterSendsRound W1`,
/// `ServerBegins { client: 1, attempt: 0 }` -> `ServerBegins C2 attempt: 0`,
/// `MiddlewareFinalizes { client: 0, result: Error { committed: true } }` ->
/// `MiddlewareFinalizes C1 result: Error(committed: true)`.
pub fn action_words<A: Debug>(action: &A) -> String {
    let text = format!("{action:?}");
    let mut parser = Parser {
        text: text.as_bytes(),
        at: 0,
    };
    match parser.value() {
        Shape::Struct(name, fields) => {
            let mut words = vec![name];
            for (key, value) in &fields {
                let actor = match (key.as_str(), value) {
                    ("writer" | "puller" | "client", Shape::Atom(index)) => index
                        .parse::<usize>()
                        .ok()
                        .map(|index| element_name(&format!("{key}s"), index)),
                    _ => None,
                };
                words.push(actor.unwrap_or_else(|| format!("{key}: {}", plain(value))));
            }
            words.join(" ")
        }
        other => plain(&other),
    }
}

/// A value without Rust's braces: `Error { committed: true }` -> `Error(committed: true)`.
fn plain(shape: &Shape) -> String {
    let join = |items: &[Shape]| items.iter().map(plain).collect::<Vec<_>>().join(", ");
    match shape {
        Shape::Atom(text) => text.clone(),
        Shape::List(items) => format!("[{}]", join(items)),
        Shape::Tuple(name, items) => format!("{name}({})", join(items)),
        Shape::Struct(name, fields) => {
            let fields: Vec<String> = fields
                .iter()
                .map(|(field, value)| format!("{field}: {}", plain(value)))
                .collect();
            format!("{name}({})", fields.join(", "))
        }
        Shape::Map(entries) => {
            let entries: Vec<String> = entries
                .iter()
                .map(|(key, value)| match key {
                    Some(key) => format!("{} -> {}", plain(key), plain(value)),
                    None => plain(value),
                })
                .collect();
            format!("[{}]", entries.join(", "))
        }
    }
}

/// A step in protocol words for the Explorer's `format_step`: the model's own `step_words`
/// from the state before and the state the action leads to (none when it leads nowhere).
pub fn step_outcome<M>(model: &M, before: &M::State, action: M::Action) -> Option<String>
where
    M: ModelSpec,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let after = model.next_state(before, action.clone())?;
    Some(model.step_words(before, &action, &after))
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The widest line of the Explorer's picture, in characters; longer lines wrap.
const PICTURE_LINE_CHARS_MAX: usize = 100;

/// `text` cut into lines of at most [`PICTURE_LINE_CHARS_MAX`] characters at spaces where it
/// can be, continuation lines indented by two spaces.
fn wrapped(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let width = line.chars().count();
        if width > 0 && width + 1 + word.chars().count() > PICTURE_LINE_CHARS_MAX {
            lines.push(std::mem::replace(&mut line, "  ".to_string()));
        } else if width > 0 {
            line.push(' ');
        }
        line.push_str(word);
        while line.chars().count() > PICTURE_LINE_CHARS_MAX {
            let head: String = line.chars().take(PICTURE_LINE_CHARS_MAX).collect();
            let rest: String = line.chars().skip(PICTURE_LINE_CHARS_MAX).collect();
            lines.push(head);
            line = format!("  {rest}");
        }
    }
    if !line.trim().is_empty() {
        lines.push(line);
    }
    lines
}

/// The expectations of a model's variant in one line: each verdict with the requirement IDs
/// expected to reach it (`expected: violated R1 R5; holds R2 ...`).
fn expectations_line<M>(model: &M) -> String
where
    M: ModelSpec,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let definitions: Vec<PropertyDef<M>> = model.property_defs();
    let mut by_verdict: Vec<(String, Vec<&'static str>)> = Vec::new();
    for def in &definitions {
        let expected = model.expected(def).to_string();
        let ids = match by_verdict
            .iter_mut()
            .find(|(verdict, _)| *verdict == expected)
        {
            Some((_, ids)) => ids,
            None => {
                by_verdict.push((expected, Vec::new()));
                &mut by_verdict.last_mut().expect("just pushed").1
            }
        };
        if !ids.contains(&def.id) {
            ids.push(def.id);
        }
    }
    let expectations: Vec<String> = by_verdict
        .iter()
        .map(|(verdict, ids)| format!("{verdict} {}", ids.join(" ")))
        .collect();
    format!("expected: {}", expectations.join("; "))
}

/// The Explorer's picture of a path's last state: the model, variant and bounds, the
/// expectations in one line per verdict (requirement IDs only: the Explorer lists the
/// properties, `oncecheck explore` prints each with its expectation), the last step in
/// protocol words, and the state by role in the model's words. Returned by every model's
/// `as_svg`; no line is wider than [`PICTURE_LINE_CHARS_MAX`] characters.
pub fn explorer_svg<M>(model: &M, path: &[(M::State, Option<M::Action>)]) -> String
where
    M: ModelSpec,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let mut lines: Vec<(String, &str)> = Vec::new();
    let mut add = |text: String, class: &'static str| {
        for line in wrapped(&text) {
            lines.push((line, class));
        }
    };
    add(
        format!(
            "{} / {}   bounds: {}",
            M::NAME,
            model.variant(),
            model.bounds()
        ),
        "title",
    );
    add(expectations_line(model), "property");
    if path.len() >= 2 {
        let (before, action) = &path[path.len() - 2];
        if let Some(action) = action {
            let words = model.step_words(before, action, &path[path.len() - 1].0);
            add(format!("step {}: {words}", path.len() - 1), "step");
        }
    }
    if let Some((state, _)) = path.last() {
        for (role, value) in model.state_roles(state) {
            add(format!("{role}: {value}"), "role");
        }
    }
    let row_px = 17;
    let width = lines
        .iter()
        .map(|(text, _)| text.chars().count())
        .max()
        .unwrap_or(0)
        * 8
        + 24;
    let height = lines.len() * row_px + 16;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"monospace\" font-size=\"12\">\n"
    );
    for (index, (text, class)) in lines.iter().enumerate() {
        let style = match *class {
            "title" => " font-weight=\"bold\"",
            "step" => " fill=\"#224\" font-weight=\"bold\"",
            "property" => " fill=\"#555\"",
            _ => "",
        };
        svg.push_str(&format!(
            "<text x=\"12\" y=\"{}\"{style} xml:space=\"preserve\">{}</text>\n",
            20 + index * row_px,
            escape(text)
        ));
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    #[allow(dead_code)]
    struct Writer {
        phase: Phase,
        next_op: u8,
    }

    #[derive(Debug)]
    #[allow(dead_code)]
    enum Phase {
        Ready,
        Sent { seq: u8 },
    }

    #[derive(Debug)]
    #[allow(dead_code)]
    struct State {
        counter: Option<u8>,
        writers: Vec<Writer>,
        pullers: Vec<u8>,
        now: u8,
    }

    #[derive(Debug)]
    #[allow(dead_code)]
    enum Action {
        WriterSendsRound { writer: u8 },
        ClockTicks,
        ServerBegins { client: u8, attempt: u8 },
        Finalizes { client: u8, result: Result },
    }

    #[derive(Debug)]
    #[allow(dead_code)]
    enum Result {
        Error { committed: bool },
    }

    #[test]
    fn a_state_splits_into_roles_named_like_the_cli_names_actors() {
        let before = State {
            counter: None,
            writers: vec![
                Writer {
                    phase: Phase::Ready,
                    next_op: 0,
                },
                Writer {
                    phase: Phase::Ready,
                    next_op: 1,
                },
            ],
            pullers: vec![3],
            now: 0,
        };
        let after = State {
            counter: Some(2),
            writers: vec![
                Writer {
                    phase: Phase::Ready,
                    next_op: 0,
                },
                Writer {
                    phase: Phase::Sent { seq: 2 },
                    next_op: 1,
                },
            ],
            pullers: vec![3],
            now: 0,
        };
        let roles_before = roles(&before);
        assert_eq!(
            roles_before,
            [
                ("counter", "None"),
                ("W1.phase", "Ready"),
                ("W1.next_op", "0"),
                ("W2.phase", "Ready"),
                ("W2.next_op", "1"),
                ("P1", "3"),
                ("now", "0")
            ]
            .map(|(role, value)| (role.to_string(), value.to_string()))
        );
        let changed = changes(&roles_before, &roles(&after));
        assert_eq!(
            changed,
            vec![
                (
                    "counter".to_string(),
                    Some("None".to_string()),
                    Some("Some(2)".to_string())
                ),
                (
                    "W2.phase".to_string(),
                    Some("Ready".to_string()),
                    Some("Sent { seq: 2 }".to_string())
                ),
            ]
        );
    }

    #[test]
    fn maps_split_per_key_and_strings_stay_whole() {
        let mut map = std::collections::BTreeMap::new();
        map.insert("claim {a}", vec![1, 2]);
        #[derive(Debug)]
        #[allow(dead_code)]
        struct Table {
            items: std::collections::BTreeMap<&'static str, Vec<u8>>,
            seen: std::collections::BTreeSet<u8>,
        }
        let table = Table {
            items: map,
            seen: [4, 5].into_iter().collect(),
        };
        assert_eq!(
            roles(&table),
            [("items[\"claim {a}\"]", "[1, 2]"), ("seen", "{4, 5}")]
                .map(|(role, value)| (role.to_string(), value.to_string()))
        );
    }

    /// Walks the first `states_max` states of every variant of a model breadth-first and
    /// asserts every action and every role it shows a reviewer is free of Rust's Debug syntax
    /// and of ITF values.
    fn words_are_protocol_words<M: ModelSpec>(states_max: usize)
    where
        M::State: Clone + Debug + Hash + Eq + Send + Sync + 'static,
        M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
    {
        let leaks = [
            "{ ", " }", "#bigint", "Some(", "[0]", "Known(", "Claim(", "Op(",
        ];
        for variant in M::VARIANTS {
            let model = M::build(variant, &M::resolve_bounds(variant, &[]).unwrap()).unwrap();
            let mut seen = std::collections::HashSet::new();
            let mut queue: std::collections::VecDeque<M::State> =
                model.init_states().into_iter().collect();
            let mut actions = Vec::new();
            while let Some(state) = queue.pop_front() {
                if seen.len() >= states_max || !seen.insert(state.clone()) {
                    continue;
                }
                for (role, value) in model.state_roles(&state) {
                    for leak in leaks {
                        assert!(
                            !role.contains(leak) && !value.contains(leak),
                            "{}/{variant}: `{leak}` in `{role}: {value}`",
                            M::NAME
                        );
                    }
                }
                actions.clear();
                model.actions(&state, &mut actions);
                for action in actions.drain(..) {
                    let words = model.format_action(&action);
                    for leak in leaks.iter().chain(&["{", "}"]) {
                        assert!(!words.contains(leak), "{}: `{leak}` in `{words}`", M::NAME);
                    }
                    if let Some(next) = model.next_state(&state, action) {
                        queue.push_back(next);
                    }
                }
            }
        }
    }

    #[test]
    fn every_model_shows_states_and_actions_in_protocol_words() {
        words_are_protocol_words::<crate::relay::RelayModel>(4000);
        words_are_protocol_words::<crate::idempotency::IdempotencyModel>(4000);
        words_are_protocol_words::<crate::token::TokenModel>(4000);
    }

    #[test]
    fn actions_name_actors_from_one() {
        assert_eq!(
            action_words(&Action::WriterSendsRound { writer: 0 }),
            "WriterSendsRound W1"
        );
        assert_eq!(
            action_words(&Action::ServerBegins {
                client: 1,
                attempt: 0
            }),
            "ServerBegins C2 attempt: 0"
        );
        assert_eq!(action_words(&Action::ClockTicks), "ClockTicks");
        assert_eq!(
            action_words(&Action::Finalizes {
                client: 0,
                result: Result::Error { committed: true }
            }),
            "Finalizes C1 result: Error(committed: true)"
        );
    }
}
