//! Model paths as trace files in the Informal Trace Format (ITF, Apalache/Quint), and back.
//!
//! A trace is data: `#meta` names the model, variant, bounds and the property the trace shows;
//! `vars` lists the state variables; every state records its variables plus `mbt::actionTaken`
//! (the action that led to it, `init` for the first) and `mbt::nondetPicks` (that action's
//! parameters). Integers are written `{"#bigint": "n"}`, sets `{"#set": [...]}`, maps
//! `{"#map": [[k, v], ...]}`, as the ITF specification requires. Where ITF leaves a choice the
//! files are shaped as Quint writes them: `mbt::nondetPicks` is a record of every
//! nondeterministic parameter of the model (`TraceEncoding::PICKS`), each `{"tag": "Some",
//! "value": v}` when the step picked it and `{"tag": "None", "value": []}` when not; variants
//! are `{"tag": T, "value": v}` records; a variant without data carries `[]` (see [`unit`]).
//!
//! Loading is strict: the loader rebuilds the model from `#meta`, re-executes every action
//! (which must be enabled in the state before it) and compares every variable of every state
//! with what the model computes. A file that is malformed, truncated, of another model, or that
//! no longer matches the model is rejected with the step and the field named.
//!
//! Nothing here does I/O: callers read and write the files.

use crate::check::{Bounds, ModelSpec};
use serde_json::{json, Map, Value as Json};
use std::fmt::Debug;
use std::hash::Hash;

/// How a model's states and actions are written to and read from ITF.
pub trait TraceEncoding: ModelSpec
where
    Self::State: Clone + Debug + Hash + Eq + Send + Sync + 'static,
    Self::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    /// The state variables, in the order of `vars`.
    const VARS: &'static [&'static str];
    /// Every parameter an action may pick (the fields of `mbt::nondetPicks`).
    const PICKS: &'static [&'static str];
    /// The variables of one state, keyed by the names in `VARS`.
    fn encode_state(&self, state: &Self::State) -> Map<String, Json>;
    /// The action's name and the parameters it picked (the `Some` fields of `mbt::nondetPicks`).
    fn encode_action(&self, action: &Self::Action) -> (String, Map<String, Json>);
    /// The inverse of `encode_action` (given the picked parameters only); the error names the
    /// offending parameter.
    fn decode_action(&self, name: &str, picks: &Map<String, Json>) -> Result<Self::Action, String>;
    /// What tells a step apart for coverage beyond its action's name and parameters, read from
    /// the state the step leaves (the relay's retry after a lost response: at which position of
    /// the push, and with which outcome). `None` for most steps; the covering set
    /// (`oncecheck traces`) holds one path per (action kind, context) pair.
    fn coverage_context(&self, _before: &Self::State, _action: &Self::Action) -> Option<String> {
        None
    }
    /// Per (action, coverage context) met, the shortest path ending with such a step, in the
    /// order met ([`covering_steps_of`]). A model with a large state space overrides it with a
    /// body that calls `covering_steps_of(self)`: the override is compiled in this crate, with
    /// its optimisation, where the default is compiled in the caller's.
    fn covering_steps(&self) -> Vec<(CoverageKey<Self>, ModelPath<Self>)>
    where
        Self::Action: Hash + Eq,
    {
        covering_steps_of(self)
    }
}

/// A step's coverage key: its action and its [`TraceEncoding::coverage_context`].
pub type CoverageKey<M> = (<M as stateright::Model>::Action, Option<String>);

/// The search behind [`TraceEncoding::covering_steps`]: one breadth-first pass over the whole
/// reachable state space ([`crate::check::first_steps_by_key`], fingerprints only).
pub fn covering_steps_of<M>(model: &M) -> Vec<(CoverageKey<M>, ModelPath<M>)>
where
    M: TraceEncoding,
    M::State: Clone + Debug + Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Eq + Hash + Send + Sync + 'static,
{
    crate::check::first_steps_by_key(model, |state, action| {
        (action.clone(), model.coverage_context(state, action))
    })
}

/// Why a trace file was rejected. `step` is the index of the state (0 = initial).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError {
    pub step: Option<usize>,
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.step {
            Some(step) => write!(f, "step {step}, field `{}`: {}", self.field, self.message),
            None => write!(f, "field `{}`: {}", self.field, self.message),
        }
    }
}

impl std::error::Error for TraceError {}

fn error(step: Option<usize>, field: &str, message: impl Into<String>) -> TraceError {
    TraceError {
        step,
        field: field.to_string(),
        message: message.into(),
    }
}

/// An ITF integer.
pub fn int(value: i64) -> Json {
    json!({ "#bigint": value.to_string() })
}

/// Reads an ITF integer (`#bigint`, or a plain JSON number, which ITF readers also accept).
pub fn read_int(value: &Json) -> Option<i64> {
    match value {
        Json::Number(number) => number.as_i64(),
        Json::Object(object) => object.get("#bigint")?.as_str()?.parse().ok(),
        _ => None,
    }
}

/// The value of a variant that carries no data. Quint writes its unit as `{"#tup": []}` (older
/// versions `{}`), but the `itf` crate's reader (0.4, `itf::Value`) refuses both inside a
/// record; the empty list is read by every ITF reader, so it stands for "no data".
pub fn unit() -> Json {
    json!([])
}

/// A variant (Quint's sum type): `{"tag": T, "value": v}`.
pub fn variant(tag: &str, value: Json) -> Json {
    json!({ "tag": tag, "value": value })
}

/// The full `mbt::nondetPicks` record of a step: every parameter of `names`, `Some` when picked.
fn picks_record(names: &[&str], picked: &Map<String, Json>) -> Json {
    let mut record = Map::new();
    for name in names {
        let value = match picked.get(*name) {
            Some(value) => variant("Some", value.clone()),
            None => variant("None", unit()),
        };
        record.insert(name.to_string(), value);
    }
    Json::Object(record)
}

/// The picked parameters of a `mbt::nondetPicks` record; every field must be `Some`/`None` and
/// named in `names`.
fn picked_of(names: &[&str], record: &Map<String, Json>) -> Result<Map<String, Json>, String> {
    let mut picked = Map::new();
    for (name, value) in record {
        if !names.contains(&name.as_str()) {
            return Err(format!(
                "`{name}` is no parameter of this model (valid: {})",
                names.join(", ")
            ));
        }
        match value.get("tag").and_then(Json::as_str) {
            Some("Some") => {
                let inner = value
                    .get("value")
                    .ok_or_else(|| format!("`{name}` is Some without a value"))?;
                picked.insert(name.clone(), inner.clone());
            }
            Some("None") => {}
            _ => return Err(format!("`{name}` is not a Some/None variant: {value}")),
        }
    }
    Ok(picked)
}

pub fn set(values: impl IntoIterator<Item = Json>) -> Json {
    json!({ "#set": values.into_iter().collect::<Vec<_>>() })
}

pub fn map(pairs: impl IntoIterator<Item = (Json, Json)>) -> Json {
    json!({ "#map": pairs.into_iter().map(|(key, value)| json!([key, value])).collect::<Vec<_>>() })
}

/// What a trace shows, written into `#meta`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceMeta {
    /// `counterexample` (of an `always`), `example` (of a `sometimes`) or `path` (covering set).
    pub kind: String,
    /// The property a counterexample or example demonstrates.
    pub property: Option<String>,
    pub description: String,
}

/// Writes a path as an ITF trace.
pub fn to_itf<M>(model: &M, path: &[(M::State, Option<M::Action>)], meta: &TraceMeta) -> Json
where
    M: TraceEncoding,
    M::State: Clone + Debug + Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    to_itf_lasso(model, path, meta, None)
}

/// Writes a path as an ITF trace; a lasso (a liveness counterexample) says where its cycle
/// starts: `loop` is the index of the state the last state returns to — the last state *is*
/// that state again, and the steps after it repeat forever. It is written where ADR-015 and the
/// `itf` crate read it (a top-level number) and, as every `#meta` value, as a string in `#meta`.
pub fn to_itf_lasso<M>(
    model: &M,
    path: &[(M::State, Option<M::Action>)],
    meta: &TraceMeta,
    lasso_start: Option<usize>,
) -> Json
where
    M: TraceEncoding,
    M::State: Clone + Debug + Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let mut states = Vec::with_capacity(path.len());
    let mut taken: Option<&M::Action> = None;
    for (index, (state, next_action)) in path.iter().enumerate() {
        let mut vars = model.encode_state(state);
        let (name, picks) = match taken {
            None => ("init".to_string(), Map::new()),
            Some(action) => model.encode_action(action),
        };
        vars.insert("mbt::actionTaken".to_string(), Json::String(name));
        vars.insert(
            "mbt::nondetPicks".to_string(),
            picks_record(M::PICKS, &picks),
        );
        let mut object = Map::new();
        object.insert("#meta".to_string(), json!({ "index": index }));
        object.extend(vars);
        states.push(Json::Object(object));
        taken = next_action.as_ref();
    }
    let mut vars: Vec<&str> = M::VARS.to_vec();
    vars.extend(["mbt::actionTaken", "mbt::nondetPicks"]);
    // Every `#meta` value is a string: ITF leaves `#meta` open, and readers such as the `itf`
    // crate accept only strings there. Bounds are written as `key=value` words.
    let mut header = json!({
        "format": "ITF",
        "format-description": "https://apalache-mc.org/docs/adr/015adr-trace.html",
        "source": "oncecheck",
        "model": M::NAME,
        "variant": model.variant(),
        "bounds": model.bounds().to_string(),
        "kind": meta.kind,
        "description": meta.description,
    });
    if let Some(property) = &meta.property {
        header["property"] = Json::String(property.clone());
    }
    let mut document = json!({ "#meta": header, "vars": vars, "states": states });
    if let Some(start) = lasso_start {
        document["#meta"]["loop"] = Json::String(start.to_string());
        document["loop"] = json!(start);
    }
    document
}

/// A trace read back and re-executed against the model.
pub struct LoadedTrace<M: stateright::Model> {
    pub model: M,
    pub meta: TraceMeta,
    /// The model's path: every state, with the action taken from it (none for the last).
    pub path: Vec<(M::State, Option<M::Action>)>,
    /// A lasso's `loop`: the index of the state the last state is again; the steps after it
    /// repeat forever.
    pub lasso_start: Option<usize>,
}

impl<M: stateright::Model> std::fmt::Debug for LoadedTrace<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "LoadedTrace({:?}, {} states)",
            self.meta,
            self.path.len()
        )
    }
}

/// The `#meta` header alone: enough to pick the model before decoding the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub model: String,
    pub variant: String,
    pub bounds: Vec<(String, u32)>,
}

pub fn read_header(document: &Json) -> Result<Header, TraceError> {
    let meta = document
        .get("#meta")
        .and_then(Json::as_object)
        .ok_or_else(|| error(None, "#meta", "missing or not an object"))?;
    let text = |field: &str| -> Result<String, TraceError> {
        meta.get(field)
            .and_then(Json::as_str)
            .map(str::to_string)
            .ok_or_else(|| error(None, &format!("#meta.{field}"), "missing or not a string"))
    };
    if text("format")? != "ITF" {
        return Err(error(None, "#meta.format", "not an ITF trace"));
    }
    let mut bounds = Vec::new();
    for word in text("bounds")?.split_whitespace() {
        let (key, value) = word
            .split_once('=')
            .ok_or_else(|| error(None, "#meta.bounds", format!("`{word}` is not key=value")))?;
        let value = value.parse::<u32>().map_err(|_| {
            error(
                None,
                &format!("#meta.bounds.{key}"),
                format!("`{value}` is not a non-negative integer"),
            )
        })?;
        bounds.push((key.to_string(), value));
    }
    Ok(Header {
        model: text("model")?,
        variant: text("variant")?,
        bounds,
    })
}

/// The model a trace's header names, built at its variant and bounds: refused when the header
/// names another model, an unknown variant, or leaves a bound out.
fn model_of_header<M>(header: &Header) -> Result<M, TraceError>
where
    M: TraceEncoding,
    M::State: Clone + Debug + Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    if header.model != M::NAME {
        return Err(error(
            None,
            "#meta.model",
            format!(
                "a trace of model `{}`, expected `{}`",
                header.model,
                M::NAME
            ),
        ));
    }
    let variant = M::resolve_variant(&header.variant)
        .map_err(|e| error(None, "#meta.variant", e.to_string()))?;
    let bounds = Bounds::resolve(M::BOUNDS, &header.bounds)
        .map_err(|e| error(None, "#meta.bounds", e.to_string()))?;
    if let Some(missing) = M::BOUNDS
        .iter()
        .find(|spec| !header.bounds.iter().any(|(key, _)| key == spec.key))
    {
        return Err(error(
            None,
            &format!("#meta.bounds.{}", missing.key),
            "missing",
        ));
    }
    M::build(variant, &bounds).map_err(|e| error(None, "#meta", e.to_string()))
}

/// The `#meta` fields a loaded trace keeps: its kind, property and description.
fn read_meta(document: &Json) -> TraceMeta {
    let meta_object = document
        .get("#meta")
        .and_then(Json::as_object)
        .expect("read_header checked #meta");
    TraceMeta {
        kind: meta_object
            .get("kind")
            .and_then(Json::as_str)
            .unwrap_or("path")
            .to_string(),
        property: meta_object
            .get("property")
            .and_then(Json::as_str)
            .map(str::to_string),
        description: meta_object
            .get("description")
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_string(),
    }
}

/// The initial state of `model` whose encoding matches the recorded state `recorded`.
fn initial_state<M>(
    model: &M,
    recorded: &Map<String, Json>,
    step: Option<usize>,
) -> Result<M::State, TraceError>
where
    M: TraceEncoding,
    M::State: Clone + Debug + Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let encoded: Vec<(M::State, Map<String, Json>)> = model
        .init_states()
        .into_iter()
        .map(|state| {
            let vars = model.encode_state(&state);
            (state, vars)
        })
        .collect();
    encoded
        .into_iter()
        .find(|(_, vars)| {
            vars.iter()
                .all(|(name, value)| recorded.get(name) == Some(value))
        })
        .map(|(state, _)| state)
        .ok_or_else(|| {
            error(
                step,
                "(state)",
                "matches none of the model's initial states at these bounds",
            )
        })
}

/// Reads and re-executes a trace of model `M`. Every error names the step and the field.
pub fn from_itf<M>(document: &Json) -> Result<LoadedTrace<M>, TraceError>
where
    M: TraceEncoding,
    M::State: Clone + Debug + Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let header = read_header(document)?;
    let model: M = model_of_header(&header)?;
    let meta = read_meta(document);
    let states = document
        .get("states")
        .and_then(Json::as_array)
        .ok_or_else(|| error(None, "states", "missing or not a list"))?;
    if states.is_empty() {
        return Err(error(
            None,
            "states",
            "empty: a trace has at least its initial state",
        ));
    }
    let mut path: Vec<(M::State, Option<M::Action>)> = Vec::with_capacity(states.len());
    for (index, recorded) in states.iter().enumerate() {
        let step = Some(index);
        let recorded = recorded
            .as_object()
            .ok_or_else(|| error(step, "(state)", "not an object"))?;
        let taken = recorded
            .get("mbt::actionTaken")
            .and_then(Json::as_str)
            .ok_or_else(|| error(step, "mbt::actionTaken", "missing or not a string"))?;
        let picks = recorded
            .get("mbt::nondetPicks")
            .and_then(Json::as_object)
            .ok_or_else(|| error(step, "mbt::nondetPicks", "missing or not an object"))?;
        let state = if index == 0 {
            if taken != "init" {
                return Err(error(
                    step,
                    "mbt::actionTaken",
                    format!("the first state must be `init`, found `{taken}`"),
                ));
            }
            initial_state(&model, recorded, step)?
        } else {
            let picked = picked_of(M::PICKS, picks)
                .map_err(|message| error(step, "mbt::nondetPicks", message))?;
            let action = model
                .decode_action(taken, &picked)
                .map_err(|message| error(step, "mbt::nondetPicks", message))?;
            let before = &path.last().expect("a state before every step").0;
            let mut enabled = Vec::new();
            model.actions(before, &mut enabled);
            if !enabled.contains(&action) {
                return Err(error(
                    step,
                    "mbt::actionTaken",
                    format!("{action:?} is not enabled in the state before it"),
                ));
            }
            let after = model.next_state(before, action.clone()).ok_or_else(|| {
                error(
                    step,
                    "mbt::actionTaken",
                    format!("{action:?} leads nowhere"),
                )
            })?;
            path.last_mut().expect("a state before every step").1 = Some(action);
            after
        };
        let computed = model.encode_state(&state);
        for name in M::VARS {
            let in_file = recorded
                .get(*name)
                .ok_or_else(|| error(step, name, "missing"))?;
            let expected = computed.get(*name).expect("encode_state writes every var");
            if in_file != expected {
                return Err(error(
                    step,
                    name,
                    format!("the file says {in_file} but the model computes {expected}"),
                ));
            }
        }
        path.push((state, None));
    }
    let lasso_start = read_loop(document, &path)?;
    Ok(LoadedTrace {
        model,
        meta,
        path,
        lasso_start,
    })
}

/// A trace's `loop` (top level, as ADR-015 places it; `#meta.loop` must agree when both are
/// there): an index before the last state whose state the last state is again.
fn read_loop<S: PartialEq, A>(
    document: &Json,
    path: &[(S, Option<A>)],
) -> Result<Option<usize>, TraceError> {
    let top = match document.get("loop") {
        None | Some(Json::Null) => None,
        Some(value) => Some(
            value
                .as_u64()
                .ok_or_else(|| error(None, "loop", format!("`{value}` is not an index")))?,
        ),
    };
    let in_meta = match document.get("#meta").and_then(|meta| meta.get("loop")) {
        None => None,
        Some(value) => Some(
            value
                .as_str()
                .and_then(|text| text.parse::<u64>().ok())
                .ok_or_else(|| error(None, "#meta.loop", format!("`{value}` is not an index")))?,
        ),
    };
    let index = match (top, in_meta) {
        (Some(top), Some(in_meta)) if top != in_meta => {
            return Err(error(
                None,
                "#meta.loop",
                format!("says {in_meta} but `loop` says {top}"),
            ))
        }
        (Some(index), _) | (None, Some(index)) => index as usize,
        (None, None) => return Ok(None),
    };
    let last = path.len() - 1;
    if index >= last {
        return Err(error(
            None,
            "loop",
            format!("{index} is not a state before the last ({last})"),
        ));
    }
    if path[index].0 != path[last].0 {
        return Err(error(
            Some(last),
            "loop",
            format!("the last state is not state {index} again: the cycle does not close"),
        ));
    }
    Ok(Some(index))
}

/// A small deterministic generator (SplitMix64) so sampled paths are reproducible from a seed
/// without a dependency in the model crate.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, bound: usize) -> usize {
        (self.next_u64() % bound as u64) as usize
    }
}

pub use crate::check::ModelPath;

/// Removes the actions whose step leaves `state` as it is (a puller's Query that returns
/// nothing): a walk that takes them goes nowhere, and a state whose only steps are such loops is
/// where a walk ends. An action that produces no state is kept (the walk stops on it, as before).
pub fn drop_self_loops<M: stateright::Model>(
    model: &M,
    state: &M::State,
    actions: &mut Vec<M::Action>,
) where
    M::State: PartialEq,
    M::Action: Clone,
{
    actions.retain(|action| {
        model
            .next_state(state, action.clone())
            .is_none_or(|next| next != *state)
    });
}

/// Up to `count` distinct random walks, each run until no action but a self-loop is enabled or
/// `depth_max` steps, starting from the initial states in turn. Reproducible from `seed`.
pub fn random_paths<M>(model: &M, count: usize, seed: u64, depth_max: usize) -> Vec<ModelPath<M>>
where
    M: ModelSpec,
    M::State: Clone + Debug + Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let mut generator = SplitMix64::new(seed);
    let initial = model.init_states();
    let mut seen = std::collections::HashSet::new();
    let mut paths = Vec::new();
    let attempts_max = count.saturating_mul(20);
    for attempt in 0..attempts_max {
        if paths.len() == count {
            break;
        }
        let mut state = initial[attempt % initial.len()].clone();
        let mut path: Vec<(M::State, Option<M::Action>)> = Vec::new();
        let mut actions = Vec::new();
        let mut signature = vec![format!("init {}", attempt % initial.len())];
        for _ in 0..depth_max {
            actions.clear();
            model.actions(&state, &mut actions);
            drop_self_loops(model, &state, &mut actions);
            if actions.is_empty() {
                break;
            }
            let action = actions.swap_remove(generator.below(actions.len()));
            let Some(next) = model.next_state(&state, action.clone()) else {
                break;
            };
            signature.push(format!("{action:?}"));
            path.push((state, Some(action)));
            state = next;
        }
        path.push((state, None));
        if seen.insert(signature) {
            paths.push(path);
        }
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::shortest_paths;
    use crate::relay::RelayModel;
    use stateright::Model;

    fn counterexample() -> (RelayModel, Json) {
        let bounds = RelayModel::resolve_bounds("add-era", &[]).unwrap();
        let model = RelayModel::build("add-era", &bounds).unwrap();
        let def = model
            .property_defs()
            .into_iter()
            .find(|def| def.id == "R1")
            .unwrap();
        let path = shortest_paths(&model, &[(def.name, def.condition, false)])
            .remove(def.name)
            .unwrap();
        let meta = TraceMeta {
            kind: "counterexample".into(),
            property: Some(def.name.into()),
            description: String::new(),
        };
        let document = to_itf(&model, &path, &meta);
        (model, document)
    }

    #[test]
    fn a_trace_loads_back_to_the_same_path() {
        let (_, document) = counterexample();
        let loaded = from_itf::<RelayModel>(&document).unwrap();
        assert_eq!(loaded.path.len(), 14);
        assert_eq!(loaded.meta.property.as_deref(), Some("R1 no-skip"));
        let text = serde_json::to_string(&document).unwrap();
        assert!(text.contains(r#""mbt::actionTaken":"WriterAddsToCounter""#));
        assert!(
            text.contains(r##"{"#bigint":"2"}"##),
            "integers are ITF bigints"
        );
    }

    /// Every object non-empty and every string a plain word: no `{}` (some ITF readers refuse
    /// it) and no Debug-shaped text such as "Sent(seq 2, expected 1)" or "claim a".
    fn assert_quint_shaped(value: &Json, at: &str) {
        match value {
            Json::Object(object) => {
                assert!(!object.is_empty(), "an empty record at {at}");
                for (key, inner) in object {
                    assert_quint_shaped(inner, &format!("{at}.{key}"));
                }
            }
            Json::Array(items) => items
                .iter()
                .enumerate()
                .for_each(|(index, item)| assert_quint_shaped(item, &format!("{at}[{index}]"))),
            Json::String(text) => assert!(
                text.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
                "a Debug-shaped string {text:?} at {at}"
            ),
            _ => {}
        }
    }

    #[test]
    fn traces_are_shaped_as_quint_writes_them() {
        let (_, document) = counterexample();
        for (index, state) in document["states"].as_array().unwrap().iter().enumerate() {
            let mut state = state.clone();
            state.as_object_mut().unwrap().remove("#meta");
            assert_quint_shaped(&state, &format!("states[{index}]"));
        }
        let first = &document["states"][0]["mbt::nondetPicks"];
        assert_eq!(first["writer"], json!({ "tag": "None", "value": [] }));
        let second = &document["states"][1]["mbt::nondetPicks"];
        assert_eq!(
            second["writer"],
            json!({ "tag": "Some", "value": { "#bigint": "0" } })
        );
        assert_eq!(second["key"]["tag"], "None");
        let writers = &document["states"][1]["writers"][0];
        assert_eq!(
            writers["phase"],
            json!({ "tag": "Allocated", "value": { "seq": { "#bigint": "1" } } })
        );
        assert_eq!(writers["counter"], json!({ "tag": "Unknown", "value": [] }));
        let items = &document["states"][1]["items"];
        assert_eq!(
            items["counter"],
            json!({ "tag": "Some", "value": { "next_seq": { "#bigint": "1" } } })
        );
        assert_eq!(items["claims"], json!({ "#map": [] }));
        let mut not_an_option = document.clone();
        not_an_option["states"][2]["mbt::nondetPicks"]["writer"] = int(1);
        let error = from_itf::<RelayModel>(&not_an_option).unwrap_err();
        assert_eq!(
            (error.step, error.field.as_str()),
            (Some(2), "mbt::nondetPicks")
        );
        assert!(error.message.contains("not a Some/None variant"), "{error}");
    }

    #[test]
    fn a_truncated_or_edited_trace_is_rejected_with_step_and_field() {
        let (_, document) = counterexample();
        let mut edited = document.clone();
        edited["states"][3]["mbt::nondetPicks"]["writer"] = variant("Some", int(7));
        let error = from_itf::<RelayModel>(&edited).unwrap_err();
        assert_eq!(error.step, Some(3));
        assert_eq!(error.field, "mbt::nondetPicks");
        assert!(error.message.contains("names no actor"), "{error}");

        let mut drifted = document.clone();
        drifted["states"][2]["items"]["claims"] = map([(Json::String("z".into()), int(1))]);
        let error = from_itf::<RelayModel>(&drifted).unwrap_err();
        assert_eq!((error.step, error.field.as_str()), (Some(2), "items"));

        let mut reordered = document.clone();
        let states = reordered["states"].as_array_mut().unwrap();
        states.swap(1, 2);
        let error = from_itf::<RelayModel>(&reordered).unwrap_err();
        assert_eq!(error.step, Some(1));

        let mut empty = document.clone();
        empty["states"] = Json::Array(vec![]);
        assert_eq!(from_itf::<RelayModel>(&empty).unwrap_err().field, "states");
    }

    #[test]
    fn a_trace_of_another_model_or_with_other_bounds_is_rejected() {
        let (_, document) = counterexample();
        let mut other = document.clone();
        other["#meta"]["model"] = Json::String("idempotency".into());
        let error = from_itf::<RelayModel>(&other).unwrap_err();
        assert_eq!(error.field, "#meta.model");

        let mut bounds = document.clone();
        let edited = bounds["#meta"]["bounds"]
            .as_str()
            .unwrap()
            .replace("pullers=1", "pullers=9");
        bounds["#meta"]["bounds"] = Json::String(edited);
        let error = from_itf::<RelayModel>(&bounds).unwrap_err();
        assert_eq!(error.field, "#meta.bounds");
        assert!(error.message.contains("out of range"), "{error}");

        let mut missing = document.clone();
        let edited = missing["#meta"]["bounds"]
            .as_str()
            .unwrap()
            .replace(" window=0", "");
        missing["#meta"]["bounds"] = Json::String(edited);
        assert_eq!(
            from_itf::<RelayModel>(&missing).unwrap_err().field,
            "#meta.bounds.window"
        );
    }

    #[test]
    fn random_paths_are_distinct_and_reproducible_from_the_seed() {
        let bounds = RelayModel::resolve_bounds("fixed", &[]).unwrap();
        let model = RelayModel::build("fixed", &bounds).unwrap();
        let first = random_paths(&model, 20, 7, 200);
        let again = random_paths(&model, 20, 7, 200);
        assert_eq!(first.len(), 20);
        let actions = |paths: &Vec<
            Vec<(crate::relay::RelayState, Option<crate::relay::Action>)>,
        >|
         -> Vec<Vec<Option<crate::relay::Action>>> {
            paths
                .iter()
                .map(|path| path.iter().map(|(_, action)| *action).collect())
                .collect()
        };
        assert_eq!(actions(&first), actions(&again));
        let other = random_paths(&model, 20, 8, 200);
        assert_ne!(actions(&first), actions(&other));
        // Walks run until nothing but a self-loop is enabled: every writer finished, and a pull
        // would return nothing (or the puller spent its pages with ops).
        for path in &first {
            let last = &path.last().unwrap().0;
            let mut enabled = Vec::new();
            model.actions(last, &mut enabled);
            drop_self_loops(&model, last, &mut enabled);
            assert!(enabled.is_empty());
            assert!(path.iter().all(|(state, action)| action
                .as_ref()
                .is_none_or(|action| model.next_state(state, *action).as_ref() != Some(state))));
        }
    }
}
