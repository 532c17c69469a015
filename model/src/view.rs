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

/// Collapses a pretty-printed Debug fragment into one line.
fn one_line(lines: &[&str]) -> String {
    let mut text = String::new();
    for line in lines {
        let piece = line.trim();
        if piece.is_empty() {
            continue;
        }
        let joins_tight =
            text.is_empty() || text.ends_with(['(', '[']) || piece.starts_with([')', ']']);
        if !joins_tight {
            text.push(' ');
        }
        text.push_str(piece);
    }
    text.trim_end_matches(',')
        .replace(",)", ")")
        .replace(",]", "]")
        .replace(", }", " }")
        .replace(",}", "}")
}

/// The state by role: `(role, value)` per top-level field of a struct state, a list field split
/// into one role per element (see [`element_name`]). Built from the state's pretty Debug form,
/// so it works for every model without a per-model encoder.
pub fn roles<T: Debug>(state: &T) -> Vec<(String, String)> {
    let text = format!("{state:#?}");
    let lines: Vec<&str> = text.lines().collect();
    let mut roles = Vec::new();
    let field_indent = "    ";
    let at_field_indent =
        |line: &str| line.starts_with(field_indent) && !line[field_indent.len()..].starts_with(' ');
    let mut index = 1;
    while index + 1 < lines.len() {
        let line = lines[index];
        let Some(rest) = line
            .strip_prefix(field_indent)
            .filter(|rest| !rest.starts_with(' '))
        else {
            index += 1;
            continue;
        };
        let Some((name, value)) = rest.split_once(": ") else {
            index += 1;
            continue;
        };
        // The field's lines run until the next line at the field indent.
        let mut end = index + 1;
        while end < lines.len() - 1 && !at_field_indent(lines[end]) {
            end += 1;
        }
        // A closing bracket at the field indent belongs to this field.
        if end < lines.len() - 1 && lines[end].trim_start().starts_with([']', '}', ')']) {
            end += 1;
        }
        let body = &lines[index + 1..end];
        if value == "[" && !body.is_empty() {
            // A list: one role per element, elements start at the next indent.
            let element_indent = "        ";
            let mut element_start = None;
            let mut element = 0;
            for (offset, element_line) in body.iter().enumerate() {
                let at_indent = element_line.starts_with(element_indent)
                    && !element_line[element_indent.len()..].starts_with(' ');
                if at_indent && !element_line.trim_start().starts_with([']', '}', ')']) {
                    if let Some(start) = element_start {
                        roles.push((element_name(name, element), one_line(&body[start..offset])));
                        element += 1;
                    }
                    element_start = Some(offset);
                }
            }
            if let Some(start) = element_start {
                let last = body.len() - 1;
                roles.push((element_name(name, element), one_line(&body[start..last])));
            }
        } else {
            let mut all = vec![value];
            all.extend_from_slice(body);
            roles.push((name.to_string(), one_line(&all)));
        }
        index = end;
    }
    roles
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
        if !after.iter().any(|(known, _)| known == role) {
            out.push((role.clone(), Some(value.clone()), None));
        }
    }
    out
}

/// An action in the reviewer's words from its Debug form, actors numbered as the CLI numbers
/// them: `WriterSendsRound { writer: 0 }` -> `WriterSendsRound W1`,
/// `ServerBegins { client: 1, attempt: 0 }` -> `ServerBegins C2 attempt: 0`.
pub fn action_words<A: Debug>(action: &A) -> String {
    let text = format!("{action:?}");
    let Some((name, fields)) = text.split_once(" { ") else {
        return text;
    };
    let fields = fields.trim_end_matches(" }");
    let mut words = vec![name.to_string()];
    for field in fields.split(", ") {
        match field.split_once(": ") {
            Some((key @ ("writer" | "puller" | "client"), value)) => match value.parse::<usize>() {
                Ok(index) => words.push(element_name(&format!("{key}s"), index)),
                Err(_) => words.push(field.to_string()),
            },
            _ => words.push(field.to_string()),
        }
    }
    words.join(" ")
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The Explorer's picture of a path's last state: the model, variant and bounds, each
/// property's expectation, the last step in protocol words, and the state by role. Returned by
/// every model's `as_svg`.
pub fn explorer_svg<M>(model: &M, path: &[(M::State, Option<M::Action>)]) -> String
where
    M: ModelSpec,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let mut lines: Vec<(String, &str)> = Vec::new();
    lines.push((
        format!(
            "{} / {}   bounds: {}",
            M::NAME,
            model.variant(),
            model.bounds()
        ),
        "title",
    ));
    let definitions: Vec<PropertyDef<M>> = model.property_defs();
    for def in &definitions {
        lines.push((
            format!(
                "expected {:<9} {}",
                model.expected(def).to_string(),
                def.name
            ),
            "property",
        ));
    }
    if path.len() >= 2 {
        let (before, action) = &path[path.len() - 2];
        if let Some(action) = action {
            let words = model.step_words(before, action, &path[path.len() - 1].0);
            lines.push((format!("step {}: {words}", path.len() - 1), "step"));
        }
    }
    if let Some((state, _)) = path.last() {
        for (role, value) in roles(state) {
            lines.push((format!("{role}: {value}"), "role"));
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
            "<text x=\"12\" y=\"{}\"{style}>{}</text>\n",
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
            roles_before
                .iter()
                .map(|(role, _)| role.as_str())
                .collect::<Vec<_>>(),
            ["counter", "writers", "W1", "W2", "P1", "now"]
                .iter()
                .filter(|role| **role != "writers")
                .copied()
                .collect::<Vec<_>>()
        );
        assert_eq!(roles_before[1].1, "Writer { phase: Ready, next_op: 0 }");
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
                    "W2".to_string(),
                    Some("Writer { phase: Ready, next_op: 1 }".to_string()),
                    Some("Writer { phase: Sent { seq: 2 }, next_op: 1 }".to_string())
                ),
            ]
        );
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
    }
}
