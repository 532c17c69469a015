//! Counterexamples as sequence diagrams (SVG): one lifeline per actor (W1, P1, C1, ...) and one
//! for the server; each step a row in protocol words. A reviewer sees the interleaving at a
//! glance instead of reading it.
//!
//! The actor of a step is the first word of its protocol words when it names one (`W1`, `P2`,
//! `C1`, `C1:`). An actor's step is a dot on the actor's lifeline with an arrow to the server (a
//! request) or from it (`receives`, an answer); a step of no actor (an item applied, a lease
//! expiring, a lost response) is a dot on the server's lifeline. The step at which the property
//! breaks (the last step of a counterexample) is marked with a red band and says so.
//!
//! Invariants: the output is a self-contained SVG and all text is escaped; nothing is cut — the
//! canvas is as wide as its longest text at [`CHAR_WIDTH_PX`] per character (an upper bound of
//! the monospace advance at [`FONT_PX`]), and every lane header is as wide as its name. Layout
//! is computed first as boxes and texts ([`Layout`]) so a test can check every extent.

use super::escape;
use oncecheck_model::check::TraceStep;

/// The font size of step labels and lane names, in pixels.
pub const FONT_PX: f64 = 12.0;
/// The font size of the title.
pub const TITLE_FONT_PX: f64 = 15.0;
/// Width of one character at [`FONT_PX`]: monospace fonts advance 0.6 em; 0.62 em leaves room
/// for the widest of them (DejaVu Sans Mono, Liberation Mono, Courier).
pub const CHAR_WIDTH_PX: f64 = FONT_PX * 0.62;
const LANE_GAP_PX: f64 = 110.0;
const ROW_HEIGHT_PX: f64 = 30.0;
const TOP_PX: f64 = 76.0;
const MARGIN_PX: f64 = 16.0;

/// The horizontal extent of `text` at `font_px` in a monospace font.
pub fn text_width(text: &str, font_px: f64) -> f64 {
    text.chars().count() as f64 * font_px * 0.62
}

/// The actor a step belongs to, if its words start with one (`W1`, `P1 `, `C2:`).
pub fn actor_of(words: &str) -> Option<String> {
    let first = words.split_whitespace().next()?.trim_end_matches(':');
    let mut characters = first.chars();
    let letter = characters.next()?;
    let rest: String = characters.collect();
    (letter.is_ascii_uppercase() && !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit()))
        .then(|| first.to_string())
}

/// A text as placed: `x` is its left edge (every text is start-anchored).
#[derive(Debug, Clone, PartialEq)]
pub struct PlacedText {
    pub x: f64,
    pub y: f64,
    pub font_px: f64,
    pub text: String,
    /// The box the text must stay inside (x, width), when it has one (lane headers).
    pub inside: Option<(f64, f64)>,
}

/// One step's row: its y, the lane its dot is on, the arrow (from x, to x) if any.
pub type Row = (f64, usize, Option<(f64, f64)>);

/// Everything a diagram draws, in canvas coordinates.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    pub width: f64,
    pub height: f64,
    pub lanes: Vec<(String, f64)>,
    pub texts: Vec<PlacedText>,
    pub rows: Vec<Row>,
    /// The row index of the breaking step, and what it says.
    pub breaking: Option<(usize, String)>,
    /// A lasso's cycle: its first and last row (the steps that repeat forever).
    pub cycle: Option<(usize, usize)>,
}

/// Lays out a diagram of `steps`, titled `title`; `breaking` names what the last step breaks
/// (e.g. "R1 no-skip violated") and marks that step; `lasso_start` marks a liveness lasso's
/// cycle: the steps after state `lasso_start`, which repeat forever.
pub fn layout(
    title: &str,
    steps: &[TraceStep],
    breaking: Option<&str>,
    lasso_start: Option<usize>,
) -> Layout {
    let actors = actors_of(steps);
    let lanes = lanes_of(&actors);
    let label_x = lanes.last().expect("the server lane").1 + 24.0;
    let mut texts = heading_texts(title, &lanes);
    let mut rows = Vec::new();
    for (row, step) in steps.iter().enumerate() {
        let y = TOP_PX + 28.0 + row as f64 * ROW_HEIGHT_PX;
        rows.push(step_row(y, step, &actors, &lanes));
        texts.push(label(
            label_x,
            y + 4.0,
            format!("{}. {}", step.step, step.words),
        ));
    }
    let breaking = match (breaking, rows.last()) {
        (Some(what), Some(&(y, _, _))) => {
            texts.push(label(label_x, y + 19.0, format!("^ {what} here")));
            Some((rows.len() - 1, what.to_string()))
        }
        _ => None,
    };
    let cycle = match lasso_start {
        Some(start) if start < steps.len() => {
            let last = steps.len() - 1;
            let words = cycle_words(start, steps.len());
            texts.push(label(label_x, rows[last].0 + 19.0, words));
            Some((start, last))
        }
        _ => None,
    };
    let right = texts
        .iter()
        .map(|text| text.x + text_width(&text.text, text.font_px))
        .fold(0.0, f64::max);
    let width = (right + MARGIN_PX).ceil();
    let extra = if breaking.is_some() || cycle.is_some() {
        18.0
    } else {
        0.0
    };
    let height = (TOP_PX + 28.0 + steps.len() as f64 * ROW_HEIGHT_PX + extra + MARGIN_PX).ceil();
    Layout {
        width,
        height,
        lanes,
        texts,
        rows,
        breaking,
        cycle,
    }
}

/// The actors of `steps` in lane order: clients and writers first, pullers last (they read
/// what the writers wrote).
fn actors_of(steps: &[TraceStep]) -> Vec<String> {
    let mut actors: Vec<String> = Vec::new();
    for step in steps {
        if let Some(actor) = actor_of(&step.words) {
            if !actors.contains(&actor) {
                actors.push(actor);
            }
        }
    }
    actors.sort_by_key(|actor| (actor.starts_with('P'), actor.clone()));
    actors
}

/// A lane header is as wide as its name, and never narrower than a short name's box.
fn header_width(name: &str) -> f64 {
    (text_width(name, FONT_PX) + 16.0).max(60.0)
}

/// The lanes (name, x of the lifeline): the actors', then the server's last; neighbouring
/// lanes far enough apart that their headers never overlap.
fn lanes_of(actors: &[String]) -> Vec<(String, f64)> {
    let mut names = actors.to_vec();
    names.push("server".to_string());
    let mut lanes = Vec::new();
    let mut x = MARGIN_PX + header_width(&names[0]) / 2.0;
    for (index, name) in names.iter().enumerate() {
        if index > 0 {
            x += header_width(&names[index - 1]) / 2.0
                + LANE_GAP_PX.max(header_width(name) / 2.0 + 20.0);
        }
        lanes.push((name.clone(), x));
    }
    lanes
}

/// The title, then every lane's name centred in its header box (which it must stay inside).
fn heading_texts(title: &str, lanes: &[(String, f64)]) -> Vec<PlacedText> {
    let mut texts = vec![PlacedText {
        x: MARGIN_PX,
        y: 26.0,
        font_px: TITLE_FONT_PX,
        text: title.to_string(),
        inside: None,
    }];
    for (name, lane_x) in lanes {
        let width = header_width(name);
        texts.push(PlacedText {
            x: lane_x - text_width(name, FONT_PX) / 2.0,
            y: TOP_PX - 9.0,
            font_px: FONT_PX,
            text: name.clone(),
            inside: Some((lane_x - width / 2.0, width)),
        });
    }
    texts
}

/// A step's row at `y`: an actor's step is a dot on its lane with an arrow to the server (a
/// request) or from it (`receives`, an answer); a step of no actor is the server's own.
fn step_row(y: f64, step: &TraceStep, actors: &[String], lanes: &[(String, f64)]) -> Row {
    let server_x = lanes.last().expect("the server lane").1;
    let lane =
        actor_of(&step.words).and_then(|actor| actors.iter().position(|known| *known == actor));
    match lane {
        Some(lane) => {
            let actor_x = lanes[lane].1;
            let arrow = if step.words.contains(" receives ") {
                (server_x, actor_x)
            } else {
                (actor_x, server_x)
            };
            (y, lane, Some(arrow))
        }
        None => (y, lanes.len() - 1, None),
    }
}

/// A text in the labels' column, right of the server's lane, where a row's words go.
fn label(x: f64, y: f64, text: String) -> PlacedText {
    PlacedText {
        x,
        y,
        font_px: FONT_PX,
        text,
        inside: None,
    }
}

/// The label under a lasso: which steps repeat forever and the state the last step returns to.
fn cycle_words(start: usize, steps: usize) -> String {
    let back_to = match start {
        0 => "the initial state".to_string(),
        after => format!("the state after step {after}"),
    };
    if start + 1 == steps {
        format!("^ cycle: step {steps} repeats forever (back to {back_to})")
    } else {
        format!(
            "^ cycle: steps {}-{steps} repeat forever (back to {back_to})",
            start + 1
        )
    }
}

/// An SVG sequence diagram of `steps`, titled `title`, the breaking step marked when `breaking`
/// names what breaks, a lasso's cycle marked (a band and a return arrow) when `lasso_start` is
/// given.
pub fn sequence_svg(
    title: &str,
    steps: &[TraceStep],
    breaking: Option<&str>,
    lasso_start: Option<usize>,
) -> String {
    let layout = layout(title, steps, breaking, lasso_start);
    let (width, height) = (layout.width, layout.height);
    let mut svg = String::new();
    svg.push_str(&format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"sequence\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" font-family=\"DejaVu Sans Mono, Liberation Mono, monospace\" font-size=\"{FONT_PX}\">\n"
    ));
    svg.push_str("<defs><marker id=\"arrow\" markerWidth=\"10\" markerHeight=\"7\" refX=\"10\" refY=\"3.5\" orient=\"auto\"><polygon points=\"0 0, 10 3.5, 0 7\"/></marker></defs>\n");
    svg.push_str(&format!(
        "<rect width=\"{width}\" height=\"{height}\" fill=\"white\"/>\n"
    ));
    push_bands(&mut svg, &layout);
    push_lanes(&mut svg, &layout);
    push_rows(&mut svg, &layout);
    push_texts(&mut svg, &layout);
    svg.push_str("</svg>\n");
    svg
}

/// The bands behind the rows, drawn first so everything else shows on them: the breaking
/// step's, and a lasso's cycle with its return arrow.
fn push_bands(svg: &mut String, layout: &Layout) {
    let width = layout.width;
    if let Some((row, _)) = &layout.breaking {
        let y = layout.rows[*row].0;
        svg.push_str(&format!(
            "<rect class=\"breaking\" x=\"0\" y=\"{}\" width=\"{width}\" height=\"{}\" fill=\"#fde2e2\"/>\n",
            y - ROW_HEIGHT_PX / 2.0,
            ROW_HEIGHT_PX + 14.0
        ));
    }
    if let Some((first, last)) = layout.cycle {
        let top = layout.rows[first].0 - ROW_HEIGHT_PX / 2.0;
        let bottom = layout.rows[last].0 + ROW_HEIGHT_PX / 2.0 + 14.0;
        svg.push_str(&format!(
            "<rect class=\"cycle\" x=\"0\" y=\"{top}\" width=\"{width}\" height=\"{}\" fill=\"#e2ecfd\"/>\n",
            bottom - top
        ));
        // The return arrow in the left margin: from the last step back up to the first.
        let x = MARGIN_PX / 2.0 + 2.0;
        svg.push_str(&format!(
            "<path class=\"cycle-return\" d=\"M {x} {} L {x} {}\" stroke=\"#25a\" stroke-width=\"2\" fill=\"none\" marker-end=\"url(#arrow)\"/>\n",
            layout.rows[last].0 + 10.0,
            layout.rows[first].0 - 10.0
        ));
    }
}

/// Each lane's header box and its dashed lifeline down to the bottom margin.
fn push_lanes(svg: &mut String, layout: &Layout) {
    let bottom = layout.height - MARGIN_PX;
    for (name, x) in &layout.lanes {
        let header = header_width(name);
        svg.push_str(&format!(
            "<rect x=\"{}\" y=\"{}\" width=\"{header}\" height=\"24\" fill=\"#eef\" stroke=\"#335\"/>\n",
            x - header / 2.0,
            TOP_PX - 26.0
        ));
        svg.push_str(&format!("<line x1=\"{x}\" y1=\"{}\" x2=\"{x}\" y2=\"{bottom}\" stroke=\"#99a\" stroke-dasharray=\"4 3\"/>\n", TOP_PX - 2.0));
    }
}

/// Each step's arrow and dot: the breaking step in red, the server's own steps in a darker red,
/// the actors' requests and answers in ink.
fn push_rows(svg: &mut String, layout: &Layout) {
    for (index, (y, lane, arrow)) in layout.rows.iter().enumerate() {
        let breaking = layout
            .breaking
            .as_ref()
            .is_some_and(|(row, _)| *row == index);
        let colour = if breaking {
            "#b00"
        } else if arrow.is_none() {
            "#a33"
        } else {
            "#224"
        };
        if let Some((from, to)) = arrow {
            svg.push_str(&format!(
                "<line x1=\"{from}\" y1=\"{y}\" x2=\"{to}\" y2=\"{y}\" stroke=\"{colour}\" stroke-width=\"1.5\" marker-end=\"url(#arrow)\"/>\n"
            ));
        }
        svg.push_str(&format!(
            "<circle cx=\"{}\" cy=\"{y}\" r=\"4\" fill=\"{colour}\"/>\n",
            layout.lanes[*lane].1
        ));
    }
}

/// Every text, escaped: the title and the breaking mark bold, the marks in their band's colour.
fn push_texts(svg: &mut String, layout: &Layout) {
    for text in &layout.texts {
        let weight = if text.font_px == TITLE_FONT_PX || text.text.ends_with(" here") {
            " font-weight=\"bold\""
        } else {
            ""
        };
        let fill = if text.text.ends_with(" here") && layout.breaking.is_some() {
            " fill=\"#b00\""
        } else if text.text.starts_with("^ cycle:") {
            " fill=\"#25a\" font-weight=\"bold\""
        } else {
            ""
        };
        svg.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{}\" font-size=\"{}\"{weight}{fill}>{}</text>\n",
            text.x,
            text.y,
            text.font_px,
            escape(&text.text)
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(step: usize, words: &str) -> TraceStep {
        TraceStep {
            step,
            action: String::new(),
            words: words.to_string(),
        }
    }

    #[test]
    fn every_step_sits_on_its_actors_lifeline_and_the_breaking_step_is_marked() {
        let steps = [
            step(1, "W1 (ADD-era) UpdateItem ADD next_seq 1 -> 1"),
            step(2, "op 2 applied (op_id b)"),
            step(3, "C1: claim k inserts a processing row, generation 1"),
            step(4, "P1 Query seq>0 limit 2 -> [2]; P1 stores cursor 2"),
            step(5, "W1 receives committed: a stored at 1"),
        ];
        let layout = layout(
            "relay/add-era R1 <no-skip>",
            &steps,
            Some("R1 no-skip violated"),
            None,
        );
        let lane = |name: &str| {
            layout
                .lanes
                .iter()
                .position(|(lane, _)| lane == name)
                .unwrap()
        };
        assert_eq!(
            layout
                .lanes
                .iter()
                .map(|(name, _)| name.as_str())
                .collect::<Vec<_>>(),
            ["C1", "W1", "P1", "server"]
        );
        let on = |row: usize| layout.rows[row].1;
        assert_eq!(
            [on(0), on(1), on(2), on(3), on(4)],
            [
                lane("W1"),
                lane("server"),
                lane("C1"),
                lane("P1"),
                lane("W1")
            ]
        );
        let x = |name: &str| layout.lanes[lane(name)].1;
        assert_eq!(
            layout.rows[0].2,
            Some((x("W1"), x("server"))),
            "a request goes from the actor to the server"
        );
        assert_eq!(
            layout.rows[4].2,
            Some((x("server"), x("W1"))),
            "an answer comes back"
        );
        assert_eq!(layout.rows[1].2, None, "an apply is the server's own step");
        assert_eq!(
            layout.breaking,
            Some((4, "R1 no-skip violated".to_string()))
        );

        let svg = sequence_svg(
            "relay/add-era R1 <no-skip>",
            &steps,
            Some("R1 no-skip violated"),
            None,
        );
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(
            svg.contains("relay/add-era R1 &lt;no-skip&gt;"),
            "titles are escaped"
        );
        assert!(svg.contains("4. P1 Query seq&gt;0 limit 2 -&gt; [2]; P1 stores cursor 2"));
        assert!(svg.contains("class=\"breaking\"") && svg.contains("^ R1 no-skip violated here"));
        assert_eq!(svg.matches("marker-end").count(), 4);
        assert_eq!(actor_of("op 1 applied"), None);
        assert_eq!(actor_of("C2: POST /transfers"), Some("C2".to_string()));
        assert!(!sequence_svg("t", &steps, None, None).contains("class=\"breaking\""));
    }

    #[test]
    fn a_lasso_marks_its_cycle_and_says_where_it_returns() {
        let steps = [
            step(1, "W1 Query seq=0 (consistent) -> next_seq 1"),
            step(2, "W1 Query seq>0 reverse limit 1 -> [3]"),
            step(3, "W1 sends TransactWriteItems{counter 1->2} -> cancelled"),
            step(4, "W1 receives cancelled: seq taken: find the top"),
        ];
        let layout = layout("relay/fixed R6 no-wedge", &steps, None, Some(1));
        assert_eq!(layout.cycle, Some((1, 3)));
        assert_eq!(layout.breaking, None);
        let label = layout
            .texts
            .iter()
            .find(|text| text.text.starts_with("^ cycle:"))
            .expect("the cycle is labelled");
        assert_eq!(
            label.text,
            "^ cycle: steps 2-4 repeat forever (back to the state after step 1)"
        );
        assert!(label.y > layout.rows[3].0 && label.y < layout.height);
        assert!(label.x + text_width(&label.text, FONT_PX) <= layout.width);
        let svg = sequence_svg("relay/fixed R6 no-wedge", &steps, None, Some(1));
        assert!(svg.contains("class=\"cycle\"") && svg.contains("class=\"cycle-return\""));
        assert!(!svg.contains("class=\"breaking\""));
        assert_eq!(layout_cycle_of(&steps, Some(0)), Some((0, 3)));
        assert_eq!(layout_cycle_of(&steps, None), None);
    }

    fn layout_cycle_of(steps: &[TraceStep], lasso_start: Option<usize>) -> Option<(usize, usize)> {
        layout("t", steps, None, lasso_start).cycle
    }

    #[test]
    fn the_canvas_grows_with_the_longest_label() {
        let short = layout("t", &[step(1, "W1 reads")], None, None);
        let long_words = format!("W1 {}", "x".repeat(300));
        let long = layout("t", &[step(1, &long_words)], None, None);
        assert!(
            long.width
                >= long.texts.last().unwrap().x + text_width(&format!("1. {long_words}"), FONT_PX)
        );
        let grown = ("1. ".len() + long_words.len() - "1. W1 reads".len()) as f64 * CHAR_WIDTH_PX;
        assert!(
            (long.width - short.width - grown).abs() < 1.0,
            "{} vs {}",
            long.width,
            short.width
        );
    }
}
