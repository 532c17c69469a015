//! The documentation pages that describe data a tool reads stay true to the code: docs/traces.md
//! names every variable, pick and action of every model's traces (from the models' own
//! encodings and conformance's list of action kinds), so a new action or variable cannot go
//! undocumented.

use oncecheck_model::trace::TraceEncoding;
use std::path::PathBuf;

fn page(name: &str) -> String {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("docs")
        .join(name);
    std::fs::read_to_string(&file).unwrap_or_else(|error| panic!("{}: {error}", file.display()))
}

fn named<M: TraceEncoding>(text: &str, model: &str)
where
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static,
{
    let names = M::VARS
        .iter()
        .chain(M::PICKS)
        .chain(oncecheck_conformance::check::action_names::of(model));
    for name in names {
        assert!(
            text.contains(&format!("`{name}`")),
            "docs/traces.md does not name `{name}` of the {model} traces"
        );
    }
}

#[test]
fn the_trace_format_page_names_every_variable_pick_and_action() {
    let text = page("traces.md");
    named::<oncecheck_model::relay::RelayModel>(&text, "relay");
    named::<oncecheck_model::idempotency::IdempotencyModel>(&text, "idempotency");
    named::<oncecheck_model::token::TokenModel>(&text, "token");
}
