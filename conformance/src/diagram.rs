//! Counterexamples as sequence diagrams (SVG): one lifeline per actor (W1, P1, C1, ...) and one
//! for the server; each step an arrow in protocol words. A reviewer sees the interleaving at a
//! glance instead of reading it.
//!
//! The actor of a step is the first word of its protocol words when it names one (`W1`, `P2`,
//! `C1`); a step of no actor (an item applied, a clock tick, a lost response) is a note on the
//! server's lifeline. Invariant: the output is a self-contained SVG; all text is escaped.

use oncecheck_model::check::TraceStep;

const LANE_WIDTH: usize = 150;
const ROW_HEIGHT: usize = 34;
const TOP: usize = 60;
const LABEL_CHARS_MAX: usize = 96;

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The actor a step belongs to, if its words start with one (`W1`, `P1 `, `C2`).
fn actor_of(words: &str) -> Option<String> {
    let first = words.split_whitespace().next()?;
    let mut characters = first.chars();
    let letter = characters.next()?;
    let rest: String = characters.collect();
    (letter.is_ascii_uppercase() && !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit())).then(|| first.to_string())
}

fn shorten(text: &str) -> String {
    if text.chars().count() <= LABEL_CHARS_MAX {
        text.to_string()
    } else {
        let cut: String = text.chars().take(LABEL_CHARS_MAX - 1).collect();
        format!("{cut}…")
    }
}

/// An SVG sequence diagram of `steps`, titled `title`.
pub fn sequence_svg(title: &str, steps: &[TraceStep]) -> String {
    let mut actors: Vec<String> = Vec::new();
    for step in steps {
        if let Some(actor) = actor_of(&step.words) {
            if !actors.contains(&actor) {
                actors.push(actor);
            }
        }
    }
    // Pullers last: they read what the writers wrote.
    actors.sort_by_key(|actor| (actor.starts_with('P'), actor.clone()));
    let server_lane = actors.len();
    let lane_x = |lane: usize| 80 + lane * LANE_WIDTH;
    let width = lane_x(server_lane) + 620;
    let height = TOP + 40 + steps.len() * ROW_HEIGHT + 30;
    let mut svg = String::new();
    svg.push_str(&format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"monospace\" font-size=\"12\">\n"
    ));
    svg.push_str("<defs><marker id=\"arrow\" markerWidth=\"10\" markerHeight=\"7\" refX=\"10\" refY=\"3.5\" orient=\"auto\"><polygon points=\"0 0, 10 3.5, 0 7\"/></marker></defs>\n");
    svg.push_str(&format!("<rect width=\"{width}\" height=\"{height}\" fill=\"white\"/>\n"));
    svg.push_str(&format!("<text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">{}</text>\n", escape(title)));
    let bottom = height - 20;
    let mut lanes: Vec<String> = actors.clone();
    lanes.push("server".to_string());
    for (lane, name) in lanes.iter().enumerate() {
        let x = lane_x(lane);
        svg.push_str(&format!("<rect x=\"{}\" y=\"{}\" width=\"90\" height=\"24\" fill=\"#eef\" stroke=\"#335\"/>\n", x - 45, TOP - 24));
        svg.push_str(&format!("<text x=\"{x}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", TOP - 8, escape(name)));
        svg.push_str(&format!("<line x1=\"{x}\" y1=\"{TOP}\" x2=\"{x}\" y2=\"{bottom}\" stroke=\"#99a\" stroke-dasharray=\"4 3\"/>\n"));
    }
    for (row, step) in steps.iter().enumerate() {
        let y = TOP + 30 + row * ROW_HEIGHT;
        let label = format!("{}. {}", step.step, shorten(&step.words));
        let server_x = lane_x(server_lane);
        match actor_of(&step.words).and_then(|actor| actors.iter().position(|known| *known == actor)) {
            Some(lane) => {
                let actor_x = lane_x(lane);
                let inbound = step.words.contains(" receives ");
                let (from, to) = if inbound { (server_x, actor_x) } else { (actor_x, server_x) };
                svg.push_str(&format!(
                    "<line x1=\"{from}\" y1=\"{y}\" x2=\"{to}\" y2=\"{y}\" stroke=\"{}\" stroke-width=\"1.5\" marker-end=\"url(#arrow)\"/>\n",
                    if inbound { "#264" } else { "#224" }
                ));
                svg.push_str(&format!(
                    "<text x=\"{}\" y=\"{}\"><title>{}</title>{}</text>\n",
                    server_x + 12,
                    y + 4,
                    escape(&step.words),
                    escape(&label)
                ));
            }
            None => {
                svg.push_str(&format!("<circle cx=\"{server_x}\" cy=\"{y}\" r=\"4\" fill=\"#a33\"/>\n"));
                svg.push_str(&format!(
                    "<text x=\"{}\" y=\"{}\" fill=\"#a33\"><title>{}</title>{}</text>\n",
                    server_x + 12,
                    y + 4,
                    escape(&step.words),
                    escape(&label)
                ));
            }
        }
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(step: usize, words: &str) -> TraceStep {
        TraceStep { step, action: String::new(), words: words.to_string() }
    }

    #[test]
    fn actors_get_lanes_and_server_events_are_notes() {
        let svg = sequence_svg(
            "relay/add-era R1 <no-skip>",
            &[
                step(1, "W1 (ADD-era) UpdateItem ADD next_seq 1 -> 1"),
                step(2, "op 2 applied (op_id b)"),
                step(3, "P1 Query seq>0 limit 2 -> [2]; P1 stores cursor 2"),
                step(4, "W1 receives committed: a stored at 1"),
            ],
        );
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains(">W1</text>") && svg.contains(">P1</text>") && svg.contains(">server</text>"));
        assert!(svg.contains("relay/add-era R1 &lt;no-skip&gt;"), "titles are escaped");
        assert!(svg.contains("3. P1 Query seq&gt;0 limit 2 -&gt; [2]; P1 stores cursor 2"));
        assert_eq!(svg.matches("<circle").count(), 1, "the apply is a note on the server lane");
        assert_eq!(svg.matches("marker-end").count(), 3);
        assert_eq!(actor_of("op 1 applied"), None);
        assert_eq!(actor_of("C2 POST /transfers"), Some("C2".to_string()));
    }
}
