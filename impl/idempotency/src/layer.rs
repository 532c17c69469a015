//! The tower layer: claim, run the handler once, capture, finalize, replay.
//!
//! Invariants (each names its requirement of specs/idempotency-middleware.md):
//! - The handler runs only for a request that won the atomic claim (M1, M5, M6).
//! - After a 2xx the row ends `succeeded` with the complete body or the too-large sentinel,
//!   and nothing in this file's control flow can leave it `processing` or mark it `failed`:
//!   every exit after a 2xx finalizes inline or through the drop guard (M2, M3).
//! - The live response is the handler's response: parts are moved, never rebuilt, and its
//!   body frames reach the client in order, over-cap tail, errors and trailers included (M7, M9).
//! - Every finalize is conditional on the claim's generation (M8).
//! - While some finalizer of a claim is pending — the handler, the capture, the inline finalize,
//!   or the drop guard's finalize — a heartbeat renews the claim's lease every
//!   `lease_renew_interval` of the layer's clock; it lives inside the future that finalizes (the
//!   request's, or the guard's background task), so it stops when the finalizing ends and when
//!   the process dies. A renewal that matches no row means the claim was taken over (or already
//!   finalized): the heartbeat stops, the finalize is fenced.
//! - A finalize is retried only after a jittered backoff and only within `finalize_budget_ms`.

use crate::capture::{capture_up_to_cap, BoxBody, BoxError, Capture, LiveBody};
use crate::clock::{Clock, SystemClock};
use crate::effect::{EffectScope, Taken};
use crate::fingerprint::Fingerprint;
use crate::key::{self, KeyError};
use crate::problem::Problem;
use crate::store::{
    CacheKey, CacheStore, CachedBody, ClaimOutcome, ClaimRequest, Fencing, FinalizeOutcome,
    RenewOutcome, StoredBody, StoredResponse, SuccessRecord,
};
use crate::sync::{self, Arc, AtomicBool, AtomicU64, Ordering};
use bytes::Bytes;
use http::header::HeaderName;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::BodyExt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tower::{Layer, Service};

/// The replay marker: `true` on a replayed response, `false` on a fresh 2xx.
pub const REPLAYED_HEADER: &str = "idempotency-replayed";
/// Default cap of a cached response body: 1 MiB.
pub const BODY_BYTES_MAX_DEFAULT: usize = 1 << 20;

/// The authenticated principal a request acts for, inserted as a request extension by the
/// application's authentication layer (which must run before this one). Cached responses are
/// scoped by it, so a tenant can never replay another tenant's response. Absent = scope "",
/// the anonymous caller. A principal with an empty name is refused with 401: it would share
/// the anonymous caller's rows, so credentials that name no one are never anonymous.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal(pub String);

/// Which behaviour the layer runs. Only `Fenced` exists without the `test-seams` feature;
/// the others exist so tests can show what each fix prevents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Behaviour {
    /// The layer before the body-integrity fix: capped `to_bytes` with an empty body on error,
    /// rebuilt responses, no drop guard, no finalize retry, unfenced finalize, no heartbeat.
    #[cfg(feature = "test-seams")]
    PreFix,
    /// The body-integrity fix (terminal rule, frame capture, drop guard, typed finalize
    /// outcomes), without generation fencing.
    #[cfg(feature = "test-seams")]
    Fixed,
    /// D1-D8 plus generation fencing: the shipped behaviour.
    #[default]
    Fenced,
}

/// Test-only: one deliberate defect in one step of the layer, for conformance replays that must
/// catch it (conformance/tests/replay_middleware.rs). Never enabled outside `test-seams`.
#[cfg(feature = "test-seams")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    /// The finalize is conditional on the key only, whatever the behaviour (M8 unfenced).
    FinalizeKeyOnly,
    /// The drop guard is never armed: a client gone after a 2xx leaves the row processing (M3).
    NoDropGuard,
    /// A replay is served without the replay marker (M4).
    ReplayUnmarked,
}

#[derive(Debug, Clone)]
pub struct Config {
    /// Largest response body cached; longer bodies store the sentinel.
    pub body_bytes_max: usize,
    /// Largest request body read for the fingerprint; longer requests get 413.
    pub request_body_bytes_max: usize,
    /// How long a claim is owned before another request with the same key may take it over,
    /// unless the heartbeat renews it.
    pub lease_secs: u64,
    /// How often the heartbeat renews a running claim's lease; `None` switches it off (then a
    /// handler that outlives its lease can be run a second time: the lease crossing).
    pub lease_renew_interval: Option<Duration>,
    /// How long a row lives (and so a replay is served) after its claim.
    pub row_ttl_secs: u64,
    /// Whether a covered request without a key gets 400 (true) or passes through uncached.
    pub key_required: bool,
    /// Finalize attempts when the database answers with an error (outcome unknown).
    pub finalize_attempts_max: u32,
    /// Total time the attempts of one finalize may take, backoffs included; past it the
    /// outcome is reported unknown. Kept well under the lease: the heartbeat has stopped by then.
    pub finalize_budget_ms: u64,
    /// The backoff before the second attempt; it doubles per attempt, each drawn with jitter
    /// from its upper half.
    pub finalize_backoff_ms: u64,
    /// The `Retry-After` of the layer's 503 (cache unavailable): how long a client should wait.
    pub retry_after_secs: u64,
    /// Unknown outcomes fail closed: a processing row whose lease lapsed is held (409
    /// `outcome-unknown`) until reconciled, never taken over and re-run. For handlers with
    /// effects outside the cache's database; off, the key re-runs after the lease (handlers that
    /// are naturally idempotent).
    pub fail_closed: bool,
    /// The methods the layer covers; others pass through.
    pub methods: Vec<Method>,
    pub behaviour: Behaviour,
    /// Test-only defects (see [`Mutation`]).
    #[cfg(feature = "test-seams")]
    pub mutations: Vec<Mutation>,
}

impl Config {
    /// Whether the test-only defect `mutation` is switched on; always false in a shipped build.
    #[cfg(feature = "test-seams")]
    fn mutated(&self, mutation: Mutation) -> bool {
        self.mutations.contains(&mutation)
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            body_bytes_max: BODY_BYTES_MAX_DEFAULT,
            request_body_bytes_max: BODY_BYTES_MAX_DEFAULT,
            lease_secs: LEASE_SECS_DEFAULT,
            lease_renew_interval: Some(default_renew_interval(LEASE_SECS_DEFAULT)),
            row_ttl_secs: 24 * 60 * 60,
            key_required: true,
            finalize_attempts_max: 5,
            finalize_budget_ms: 2_000,
            finalize_backoff_ms: 25,
            retry_after_secs: crate::problem::RETRY_AFTER_SECS_DEFAULT,
            fail_closed: false,
            methods: vec![Method::POST, Method::PATCH],
            behaviour: Behaviour::Fenced,
            #[cfg(feature = "test-seams")]
            mutations: Vec::new(),
        }
    }
}

/// The default lease of a claim.
pub const LEASE_SECS_DEFAULT: u64 = 60;

/// The heartbeat's default period: a third of the lease, so two renewals in a row may fail
/// (or be late) before the lease runs out.
pub fn default_renew_interval(lease_secs: u64) -> Duration {
    Duration::from_millis(lease_secs.saturating_mul(1000) / 3)
}

/// Counters of the layer's rarer paths, for tests and operators.
#[derive(Debug, Default)]
pub struct Stats {
    guard_fired: AtomicU64,
    finalize_applied: AtomicU64,
    finalize_lost: AtomicU64,
    finalize_unknown: AtomicU64,
    finalize_retries: AtomicU64,
    replays: AtomicU64,
    lease_renewed: AtomicU64,
    lease_lost: AtomicU64,
    lease_renew_errors: AtomicU64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatsSnapshot {
    pub guard_fired: u64,
    pub finalize_applied: u64,
    pub finalize_lost: u64,
    pub finalize_unknown: u64,
    /// Finalize attempts after the first (each after a backoff).
    pub finalize_retries: u64,
    pub replays: u64,
    /// Heartbeat renewals that moved a lease.
    pub lease_renewed: u64,
    /// Heartbeats that found their claim taken over (and stopped).
    pub lease_lost: u64,
    /// Renewals the database answered with an error (the heartbeat keeps going).
    pub lease_renew_errors: u64,
}

struct Shared<St> {
    store: St,
    clock: Box<dyn Clock>,
    config: Config,
    stats: Stats,
}

/// The Idempotency-Key layer. Build it with [`IdempotencyLayer::builder`].
pub struct IdempotencyLayer<St> {
    shared: Arc<Shared<St>>,
}

impl<St> Clone for IdempotencyLayer<St> {
    fn clone(&self) -> Self {
        IdempotencyLayer {
            shared: self.shared.clone(),
        }
    }
}

impl<St: CacheStore> IdempotencyLayer<St> {
    pub fn builder(store: St) -> IdempotencyLayerBuilder<St> {
        IdempotencyLayerBuilder {
            store,
            clock: None,
            config: Config::default(),
            renewal: Renewal::ThirdOfLease,
        }
    }

    pub fn store(&self) -> &St {
        &self.shared.store
    }

    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// The layer's clock, now.
    pub(crate) fn now_millis(&self) -> i64 {
        self.shared.clock.now_millis()
    }

    pub fn stats(&self) -> StatsSnapshot {
        let stats = &self.shared.stats;
        StatsSnapshot {
            guard_fired: stats.guard_fired.load(Ordering::SeqCst),
            finalize_applied: stats.finalize_applied.load(Ordering::SeqCst),
            finalize_lost: stats.finalize_lost.load(Ordering::SeqCst),
            finalize_unknown: stats.finalize_unknown.load(Ordering::SeqCst),
            finalize_retries: stats.finalize_retries.load(Ordering::SeqCst),
            replays: stats.replays.load(Ordering::SeqCst),
            lease_renewed: stats.lease_renewed.load(Ordering::SeqCst),
            lease_lost: stats.lease_lost.load(Ordering::SeqCst),
            lease_renew_errors: stats.lease_renew_errors.load(Ordering::SeqCst),
        }
    }
}

pub struct IdempotencyLayerBuilder<St> {
    store: St,
    clock: Option<Box<dyn Clock>>,
    config: Config,
    renewal: Renewal,
}

/// The heartbeat as the builder was told, resolved against the lease in `build`.
#[derive(Debug, Clone, Copy)]
enum Renewal {
    ThirdOfLease,
    Every(Duration),
    Off,
}

impl<St: CacheStore> IdempotencyLayerBuilder<St> {
    pub fn body_bytes_max(mut self, bytes: usize) -> Self {
        self.config.body_bytes_max = bytes;
        self
    }

    pub fn request_body_bytes_max(mut self, bytes: usize) -> Self {
        self.config.request_body_bytes_max = bytes;
        self
    }

    pub fn lease_secs(mut self, seconds: u64) -> Self {
        self.config.lease_secs = seconds;
        self
    }

    pub fn row_ttl_secs(mut self, seconds: u64) -> Self {
        self.config.row_ttl_secs = seconds;
        self
    }

    pub fn key_required(mut self, required: bool) -> Self {
        self.config.key_required = required;
        self
    }

    pub fn finalize_attempts_max(mut self, attempts: u32) -> Self {
        self.config.finalize_attempts_max = attempts.max(1);
        self
    }

    /// The total time one finalize may spend on attempts and backoffs (default 2 000 ms).
    pub fn finalize_budget_ms(mut self, milliseconds: u64) -> Self {
        self.config.finalize_budget_ms = milliseconds;
        self
    }

    /// The first backoff between finalize attempts (default 25 ms, doubling, jittered).
    pub fn finalize_backoff_ms(mut self, milliseconds: u64) -> Self {
        self.config.finalize_backoff_ms = milliseconds;
        self
    }

    /// How often the heartbeat renews a running claim's lease (default: a third of the lease).
    pub fn lease_renew_interval(mut self, interval: Duration) -> Self {
        self.renewal = Renewal::Every(interval);
        self
    }

    /// Switches the heartbeat off: a handler that outlives its lease may then run twice (the
    /// lease crossing). For handlers with their own deadline shorter than the lease.
    pub fn without_lease_renewal(mut self) -> Self {
        self.renewal = Renewal::Off;
        self
    }

    /// Unknown outcomes fail closed (see [`Config::fail_closed`]); resolve held keys with
    /// [`IdempotencyLayer::reconcile_unknown`] or [`IdempotencyLayer::resolve_unknown`].
    pub fn fail_closed(mut self) -> Self {
        self.config.fail_closed = true;
        self
    }

    /// The `Retry-After` seconds of the layer's 503 answers (default 1).
    pub fn retry_after_secs(mut self, seconds: u64) -> Self {
        self.config.retry_after_secs = seconds;
        self
    }

    pub fn methods(mut self, methods: Vec<Method>) -> Self {
        self.config.methods = methods;
        self
    }

    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Box::new(clock));
        self
    }

    /// Test-only: run a behaviour without one of the fixes.
    #[cfg(feature = "test-seams")]
    pub fn behaviour(mut self, behaviour: Behaviour) -> Self {
        self.config.behaviour = behaviour;
        self
    }

    /// Test-only: switch on a deliberate defect (repeatable).
    #[cfg(feature = "test-seams")]
    pub fn mutation(mut self, mutation: Mutation) -> Self {
        self.config.mutations.push(mutation);
        self
    }

    /// Builds the layer.
    ///
    /// # Panics
    /// When the heartbeat interval is zero or not shorter than the lease, or the finalize budget
    /// is not shorter than the lease: either would let a live claim's lease run out.
    pub fn build(self) -> IdempotencyLayer<St> {
        let mut config = self.config;
        let lease = Duration::from_secs(config.lease_secs);
        config.lease_renew_interval = match self.renewal {
            Renewal::ThirdOfLease => Some(default_renew_interval(config.lease_secs)),
            Renewal::Every(interval) => Some(interval),
            Renewal::Off => None,
        };
        if let Some(interval) = config.lease_renew_interval {
            assert!(!interval.is_zero(), "lease_renew_interval must be positive");
            assert!(
                interval < lease,
                "lease_renew_interval ({interval:?}) must be shorter than the lease ({lease:?})"
            );
        }
        assert!(
            Duration::from_millis(config.finalize_budget_ms) < lease,
            "finalize_budget_ms ({}) must be shorter than the lease ({lease:?})",
            config.finalize_budget_ms
        );
        IdempotencyLayer {
            shared: Arc::new(Shared {
                store: self.store,
                clock: self.clock.unwrap_or_else(|| Box::new(SystemClock)),
                config,
                stats: Stats::default(),
            }),
        }
    }
}

impl<S, St: CacheStore> Layer<S> for IdempotencyLayer<St> {
    type Service = IdempotencyService<S, St>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotencyService {
            inner,
            shared: self.shared.clone(),
        }
    }
}

pub struct IdempotencyService<S, St> {
    inner: S,
    shared: Arc<Shared<St>>,
}

impl<S: Clone, St> Clone for IdempotencyService<S, St> {
    fn clone(&self) -> Self {
        IdempotencyService {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S, St, ReqBody, ResBody> Service<Request<ReqBody>> for IdempotencyService<S, St>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    St: CacheStore,
    ReqBody: Body<Data = Bytes> + From<Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<LiveBody>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<LiveBody>, S::Error>> + Send>>;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(context)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The clone that was driven to readiness is the one that serves this request.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(handle(inner, self.shared.clone(), request))
    }
}

fn boxed<B>(body: B) -> BoxBody
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    fn erase<E: Into<BoxError>>(error: E) -> BoxError {
        error.into()
    }
    body.map_err(erase::<B::Error>).boxed_unsync()
}

fn passthrough<B>(response: Response<B>) -> Response<LiveBody>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let (parts, body) = response.into_parts();
    Response::from_parts(parts, LiveBody::passthrough(boxed(body)))
}

fn problem_response(problem: Problem) -> Response<LiveBody> {
    problem.to_response().map(LiveBody::full)
}

fn key_problem(error: &KeyError) -> Problem {
    let kind = match error {
        KeyError::Missing => "missing-key",
        _ => "invalid-key",
    };
    Problem {
        status: StatusCode::BAD_REQUEST,
        kind,
        title: "Invalid Idempotency-Key",
        detail: error.to_string(),
    }
}

async fn handle<S, St, ReqBody, ResBody>(
    mut inner: S,
    shared: Arc<Shared<St>>,
    request: Request<ReqBody>,
) -> Result<Response<LiveBody>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send,
    S::Future: Send,
    St: CacheStore,
    ReqBody: Body<Data = Bytes> + From<Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let config = &shared.config;
    if !config.methods.contains(request.method()) {
        return Ok(passthrough(inner.call(request).await?));
    }
    let key = match key::parse_key(request.headers()) {
        Ok(Some(key)) => key,
        Ok(None) if !config.key_required => return Ok(passthrough(inner.call(request).await?)),
        Ok(None) => return Ok(problem_response(key_problem(&KeyError::Missing))),
        Err(error) => return Ok(problem_response(key_problem(&error))),
    };
    let (parts, body) = request.into_parts();
    let body_bytes = match collect_request(body, config.request_body_bytes_max).await {
        Ok(bytes) => bytes,
        Err(problem) => return Ok(problem_response(problem)),
    };
    let (cache_key, fingerprint) = match identify(&parts, key, &body_bytes) {
        Ok(identified) => identified,
        Err(problem) => return Ok(problem_response(problem)),
    };
    let generation = match claim_or_answer(&shared, &cache_key, &fingerprint).await {
        Ok(generation) => generation,
        Err(answer) => return Ok(answer),
    };
    let request = Request::from_parts(parts, ReqBody::from(body_bytes));
    run_claimed(inner, shared, request, cache_key, generation).await
}

/// The cache key and fingerprint of a covered request: the principal's scope (a principal with
/// an empty name is refused), method, path and key; the method, path with query and body.
fn identify(
    parts: &http::request::Parts,
    key: String,
    body_bytes: &Bytes,
) -> Result<(CacheKey, Fingerprint), Problem> {
    let path_and_query = parts
        .uri
        .path_and_query()
        .map_or(parts.uri.path(), |value| value.as_str());
    let fingerprint = Fingerprint::of(&parts.method, path_and_query, body_bytes);
    let scope = match parts.extensions.get::<Principal>() {
        None => String::new(),
        Some(Principal(name)) if name.is_empty() => return Err(empty_principal_problem()),
        Some(Principal(name)) => name.clone(),
    };
    let cache_key = CacheKey {
        scope,
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        key,
    };
    Ok((cache_key, fingerprint))
}

/// Claims the key: the claim's generation when this request won it, or the answer of a request
/// that must not run the handler (409, 422, the replay, or 503 when the cache is unreachable).
async fn claim_or_answer<St: CacheStore>(
    shared: &Shared<St>,
    cache_key: &CacheKey,
    fingerprint: &Fingerprint,
) -> Result<i64, Response<LiveBody>> {
    let config = &shared.config;
    //= specs/idempotency-middleware.md#M1
    //# The handler runs only for the request that won the atomic claim of its key.
    let claim = shared
        .store
        .claim(ClaimRequest {
            key: cache_key,
            fingerprint,
            now_millis: shared.clock.now_millis(),
            lease_millis: secs_to_millis(config.lease_secs),
            row_ttl_millis: secs_to_millis(config.row_ttl_secs),
            take_over_lapsed: !config.fail_closed,
        })
        .await;
    match claim {
        Ok(ClaimOutcome::Claimed { generation }) => Ok(generation),
        //= specs/idempotency-middleware.md#M6
        //# A request whose key is held by a live claim gets 409 and never runs the handler.
        Ok(ClaimOutcome::InFlight) => Err(problem_response(in_flight_problem())),
        //= specs/idempotency-middleware.md#M5
        //# A key reused with another fingerprint gets 422 and never runs the handler.
        Ok(ClaimOutcome::FingerprintMismatch) => Err(problem_response(mismatch_problem())),
        //= specs/idempotency-middleware.md#M1
        //# The handler runs only for the request that won the atomic claim of its key.
        Ok(ClaimOutcome::OutcomeUnknown) => Err(problem_response(outcome_unknown_problem())),
        Ok(ClaimOutcome::Replay(stored)) => {
            shared.stats.replays.fetch_add(1, Ordering::SeqCst);
            #[cfg(feature = "test-seams")]
            let marked = !config.mutated(Mutation::ReplayUnmarked);
            #[cfg(not(feature = "test-seams"))]
            let marked = true;
            Err(replay_response(stored, config.body_bytes_max, marked))
        }
        Err(error) => {
            // Without a claim the handler must not run: a retry later is safe, a run now is not.
            tracing::warn!(event = "idempotency.claim_unavailable", key = %cache_key.key, %error);
            let response = unavailable_problem().to_response_retry_after(config.retry_after_secs);
            Err(response.map(LiveBody::full))
        }
    }
}

/// Runs the handler for the claim `generation` of `cache_key`, with the request's effect scope
/// and the claim's heartbeat, and ends the claim with what the handler answered.
async fn run_claimed<S, St, ReqBody, ResBody>(
    mut inner: S,
    shared: Arc<Shared<St>>,
    mut request: Request<ReqBody>,
    cache_key: CacheKey,
    generation: i64,
) -> Result<Response<LiveBody>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send,
    S::Future: Send,
    St: CacheStore,
    ReqBody: Body<Data = Bytes> + From<Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    // The request's transaction for effects in the cache's database, if its handler wants one.
    let scope = {
        let store = shared.store.clone();
        EffectScope::new(Box::new(move || {
            let store = store.clone();
            Box::pin(async move { store.begin_effect().await })
        }))
    };
    request.extensions_mut().insert(scope.clone());
    let claim = ClaimOwner {
        shared: shared.clone(),
        key: cache_key,
        generation,
        finalized: Arc::new(AtomicBool::new(false)),
    };
    let heartbeat = Heartbeat::for_claim(&claim.shared, &claim.key, generation, &claim.finalized);
    let work = async move {
        let response = match inner.call(request).await {
            Ok(response) => response,
            Err(error) => {
                // No response was produced: its effects roll back, and the attempt is recorded
                // failed so a retry may run it again.
                claim.abandon(scope.take()).await;
                claim
                    .finalize(Write::Failure(StatusCode::INTERNAL_SERVER_ERROR.as_u16()))
                    .await;
                return Err(error);
            }
        };
        Ok(claim.finish(response, &scope).await)
    };
    match heartbeat {
        Some(heartbeat) => with_heartbeat(heartbeat, work).await,
        None => work.await,
    }
}

/// Runs `work` with the heartbeat beside it in the same future: whichever way `work` ends
/// (or is dropped), the heartbeat ends with it. A heartbeat that ends first (its claim was
/// taken over) leaves `work` running alone; its finalize is fenced.
//= specs/idempotency-middleware.md#M11
//# Every request eventually gets an answer once faults stop, and a claim no request works on any more is eventually released.
async fn with_heartbeat<St: CacheStore, T>(
    heartbeat: Heartbeat<St>,
    work: impl Future<Output = T>,
) -> T {
    use futures_util::future::{select, Either};
    let work = std::pin::pin!(work);
    let beating = std::pin::pin!(heartbeat.run());
    match select(work, beating).await {
        Either::Left((output, _)) => output,
        Either::Right(((), work)) => work.await,
    }
}

/// Renews one claim's lease until its finalizing ends or a renewal finds the claim gone.
struct Heartbeat<St> {
    shared: Arc<Shared<St>>,
    key: CacheKey,
    generation: i64,
    interval: Duration,
    /// The layer's clock when the heartbeat was made (just after the claim, before the work it
    /// covers starts): its first beat is one interval after it, however late it is first polled.
    started_millis: i64,
    /// Set when the finalizing this heartbeat covers has ended: a later renewal is not due.
    finalized: Arc<AtomicBool>,
}

impl<St: CacheStore> Heartbeat<St> {
    /// The heartbeat of the claim `generation` of `key`, unless the layer runs without one.
    fn for_claim(
        shared: &Arc<Shared<St>>,
        key: &CacheKey,
        generation: i64,
        finalized: &Arc<AtomicBool>,
    ) -> Option<Self> {
        #[cfg(feature = "test-seams")]
        if shared.config.behaviour == Behaviour::PreFix {
            return None;
        }
        Some(Heartbeat {
            shared: shared.clone(),
            key: key.clone(),
            generation,
            interval: shared.config.lease_renew_interval?,
            started_millis: shared.clock.now_millis(),
            finalized: finalized.clone(),
        })
    }

    //= specs/idempotency-middleware.md#M1
    //# The handler runs only for the request that won the atomic claim of its key.
    async fn run(self) {
        let lease_millis = secs_to_millis(self.shared.config.lease_secs);
        let interval_millis = i64::try_from(self.interval.as_millis()).unwrap_or(i64::MAX);
        let mut next = self.started_millis.saturating_add(interval_millis);
        loop {
            // On the layer's own clock, the one the lease is measured in.
            self.shared.clock.sleep_until(next).await;
            if self.finalized.load(Ordering::SeqCst) {
                return;
            }
            let now = self.shared.clock.now_millis();
            next = now.saturating_add(interval_millis);
            let renewed = self
                .shared
                .store
                .renew_lease(&self.key, self.generation, now + lease_millis, now)
                .await;
            let stats = &self.shared.stats;
            match renewed {
                Ok(RenewOutcome::Renewed) => {
                    stats.lease_renewed.fetch_add(1, Ordering::SeqCst);
                    tracing::debug!(event = "idempotency.lease_renewed", key = %self.key.key, generation = self.generation);
                }
                // A finalize that ended after the check above made the row terminal: not a loss.
                Ok(RenewOutcome::Lost) if self.finalized.load(Ordering::SeqCst) => return,
                Ok(RenewOutcome::Lost) => {
                    stats.lease_lost.fetch_add(1, Ordering::SeqCst);
                    tracing::warn!(
                        event = "idempotency.lease_lost",
                        key = %self.key.key,
                        generation = self.generation,
                        "the claim was taken over (its lease ran out between renewals); its finalize will be fenced"
                    );
                    return;
                }
                Err(error) => {
                    // The lease is still live until it runs out: keep trying at the next beat.
                    stats.lease_renew_errors.fetch_add(1, Ordering::SeqCst);
                    tracing::warn!(event = "idempotency.lease_renew_failed", key = %self.key.key, %error);
                }
            }
        }
    }
}

/// Reads the request body for the fingerprint (boxed first so its error type is nameable).
async fn collect_request<B>(body: B, bytes_max: usize) -> Result<Bytes, Problem>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    match collect_limited(boxed(body), bytes_max).await {
        Ok(bytes) => Ok(bytes),
        Err(error) => Err(request_body_problem(&error)),
    }
}

#[derive(Debug, thiserror::Error)]
#[error("body longer than {bytes_max} bytes")]
struct BodyTooLong {
    bytes_max: usize,
}

/// `to_bytes` with a length limit: the whole body, or an error once it passes `bytes_max`
/// (`BodyTooLong`) or fails. Trailers are dropped.
async fn collect_limited(mut body: BoxBody, bytes_max: usize) -> Result<Bytes, BoxError> {
    let mut buffer = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            if buffer.len() + data.len() > bytes_max {
                return Err(Box::new(BodyTooLong { bytes_max }));
            }
            buffer.extend_from_slice(&data);
        }
    }
    Ok(buffer.freeze())
}

fn secs_to_millis(seconds: u64) -> i64 {
    i64::try_from(seconds.saturating_mul(1000)).unwrap_or(i64::MAX)
}

fn request_body_problem(error: &BoxError) -> Problem {
    if error.is::<BodyTooLong>() {
        Problem {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            kind: "request-too-large",
            title: "Request body too large to fingerprint",
            detail: "the request body is longer than this endpoint accepts".into(),
        }
    } else {
        Problem {
            status: StatusCode::BAD_REQUEST,
            kind: "request-body-unreadable",
            title: "Request body could not be read",
            detail: error.to_string(),
        }
    }
}

fn in_flight_problem() -> Problem {
    Problem {
        status: StatusCode::CONFLICT,
        kind: "in-flight",
        title: "A request with this Idempotency-Key is being processed",
        detail: "retry after the first request completes".into(),
    }
}

fn mismatch_problem() -> Problem {
    Problem {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        kind: "fingerprint-mismatch",
        title: "Idempotency-Key reused with a different request",
        detail: "this key was first used with another method, path or body".into(),
    }
}

fn empty_principal_problem() -> Problem {
    Problem {
        status: StatusCode::UNAUTHORIZED,
        kind: "empty-principal",
        title: "The request's credentials name no one",
        detail: "the authentication layer accepted credentials with an empty principal".into(),
    }
}

fn outcome_unknown_problem() -> Problem {
    Problem {
        status: StatusCode::CONFLICT,
        kind: "outcome-unknown",
        title: "The outcome of the first request with this Idempotency-Key is unknown",
        detail: "the key is held until its effect is reconciled; it will not run again until then"
            .into(),
    }
}

fn claim_lost_problem() -> Problem {
    Problem {
        status: StatusCode::SERVICE_UNAVAILABLE,
        kind: "claim-lost",
        title: "The request's claim was taken over before its effects committed",
        detail: "its effects were rolled back; retry with the same key".into(),
    }
}

fn commit_unknown_problem() -> Problem {
    Problem {
        status: StatusCode::SERVICE_UNAVAILABLE,
        kind: "commit-unknown",
        title: "The request's effects and response may or may not have committed",
        detail: "they committed together or not at all; retry with the same key to learn which"
            .into(),
    }
}

fn effect_held_problem() -> Problem {
    Problem {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        kind: "effect-transaction-held",
        title: "The handler kept its effect transaction past its response",
        detail: "its effects were not committed; the handler must drop the transaction before it answers".into(),
    }
}

fn unavailable_problem() -> Problem {
    Problem {
        status: StatusCode::SERVICE_UNAVAILABLE,
        kind: "cache-unavailable",
        title: "The idempotency cache is unavailable",
        detail: "the request was not processed; retry with the same key".into(),
    }
}

/// Rebuilds a stored success, marked as a replay.
//= specs/idempotency-middleware.md#M4
//# A replay returns the stored status and body, or the sentinel response, marked as a replay.
fn replay_response(
    stored: StoredResponse,
    body_bytes_max: usize,
    marked: bool,
) -> Response<LiveBody> {
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    let mut response = match stored.body {
        StoredBody::Full(body) => {
            let mut response = Response::new(LiveBody::full(body));
            for (name, value) in &stored.headers {
                if let (Ok(name), Ok(value)) = (HeaderName::try_from(name.as_str()), HeaderValue::from_str(value)) {
                    response.headers_mut().append(name, value);
                }
            }
            response
        }
        StoredBody::TooLarge => problem_response(Problem {
            status,
            kind: "response-not-stored",
            title: "The original request succeeded; its response was not stored",
            detail: format!(
                "the response body was over {body_bytes_max} bytes, failed while streaming, or its client went away"
            ),
        }),
    };
    *response.status_mut() = status;
    if marked {
        response
            .headers_mut()
            .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    }
    response
}

/// The headers a success row stores: all but framing headers and the marker.
fn stored_headers(headers: &HeaderMap) -> Vec<(String, String)> {
    use http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
    headers
        .iter()
        .filter(|(name, _)| ![CONTENT_LENGTH, TRANSFER_ENCODING, CONNECTION].contains(name))
        .filter(|(name, _)| name.as_str() != REPLAYED_HEADER)
        // A header value that is not visible ASCII cannot round-trip as text; it is not replayed.
        .filter_map(|(name, value)| {
            Some((name.as_str().to_string(), value.to_str().ok()?.to_string()))
        })
        .collect()
}

/// What a finalize writes.
#[derive(Clone, Copy)]
enum Write<'a> {
    Success(SuccessRecord<'a>),
    Failure(u16),
}

/// What a finalize ended with, after its retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Finalized {
    Applied,
    Lost,
    Unknown,
}

fn fencing_of(config: &Config) -> Fencing {
    #[cfg(feature = "test-seams")]
    if config.mutated(Mutation::FinalizeKeyOnly) {
        return Fencing::KeyOnly;
    }
    match config.behaviour {
        Behaviour::Fenced => Fencing::Generation,
        #[cfg(feature = "test-seams")]
        Behaviour::Fixed | Behaviour::PreFix => Fencing::KeyOnly,
    }
}

/// The pre-fix layer made one finalize attempt; every other behaviour retries.
fn attempts_max_of(config: &Config) -> u32 {
    #[cfg(feature = "test-seams")]
    if config.behaviour == Behaviour::PreFix {
        return 1;
    }
    config.finalize_attempts_max
}

/// The backoff before attempt `attempt` (2, 3, ...): the base doubled per attempt, drawn from
/// its upper half so concurrent finalizers spread out but never retry at once.
fn finalize_backoff(config: &Config, attempt: u32) -> Duration {
    let ceiling = config
        .finalize_backoff_ms
        .saturating_mul(1 << attempt.saturating_sub(2).min(16));
    let floor = ceiling / 2;
    Duration::from_millis(floor + rand::random_range(0..=ceiling - floor))
}

/// Writes a terminal outcome; every result has its own event.
async fn finalize<St: CacheStore>(
    shared: &Shared<St>,
    key: &CacheKey,
    generation: i64,
    write: Write<'_>,
) -> Finalized {
    let fencing = fencing_of(&shared.config);
    let attempts_max = attempts_max_of(&shared.config);
    let budget = Duration::from_millis(shared.config.finalize_budget_ms);
    let started = std::time::Instant::now();
    let write = within_cap(write, key, shared.config.body_bytes_max);
    let mut last_error = None;
    let mut attempts = 0;
    for attempt in 1..=attempts_max {
        if attempt > 1 {
            let backoff = finalize_backoff(&shared.config, attempt);
            if started.elapsed() + backoff >= budget {
                break;
            }
            shared.stats.finalize_retries.fetch_add(1, Ordering::SeqCst);
            sync::sleep(backoff).await;
        }
        attempts = attempt;
        let now = shared.clock.now_millis();
        let attempt_future = finalize_once(shared, key, generation, fencing, write, now);
        // An attempt that hangs is cut at the budget: its outcome is unknown like an error's.
        let Some(result) =
            sync::within(budget.saturating_sub(started.elapsed()), attempt_future).await
        else {
            last_error = Some("the attempt did not answer within the finalize budget".to_string());
            break;
        };
        match result {
            Ok(outcome) => return finalize_answered(shared, key, generation, attempt, outcome),
            Err(error) => last_error = Some(error.to_string()),
        }
    }
    shared.stats.finalize_unknown.fetch_add(1, Ordering::SeqCst);
    tracing::warn!(
        event = "idempotency.finalize_unknown",
        key = %key.key,
        generation,
        attempts,
        budget_ms = shared.config.finalize_budget_ms,
        error = %last_error.unwrap_or_default(),
        "the finalize may or may not have committed; the live response is delivered unchanged"
    );
    Finalized::Unknown
}

/// A success's full body over the cap becomes the sentinel. Defensive: a full body over the cap
/// is a caller bug; store the sentinel rather than a row the cap promises never exists.
fn within_cap<'a>(write: Write<'a>, key: &CacheKey, cap: usize) -> Write<'a> {
    match write {
        Write::Success(
            record @ SuccessRecord {
                body: CachedBody::Full(data),
                ..
            },
        ) if data.len() > cap => {
            tracing::warn!(event = "idempotency.oversize_full_body", key = %key.key, bytes = data.len(), cap);
            Write::Success(SuccessRecord {
                body: CachedBody::TooLarge,
                ..record
            })
        }
        other => other,
    }
}

/// One finalize statement.
//= specs/idempotency-middleware.md#M8
//# Every finalize is conditional on its claim's generation and on the row still processing.
async fn finalize_once<St: CacheStore>(
    shared: &Shared<St>,
    key: &CacheKey,
    generation: i64,
    fencing: Fencing,
    write: Write<'_>,
    now: i64,
) -> Result<FinalizeOutcome, crate::store::StoreError> {
    match write {
        Write::Success(record) => {
            shared
                .store
                .finalize_succeeded(key, generation, fencing, record, now)
                .await
        }
        Write::Failure(status) => {
            shared
                .store
                .finalize_failed(key, generation, fencing, status, now)
                .await
        }
    }
}

/// A finalize the database answered (at attempt `attempt`), counted and logged.
fn finalize_answered<St>(
    shared: &Shared<St>,
    key: &CacheKey,
    generation: i64,
    attempt: u32,
    outcome: FinalizeOutcome,
) -> Finalized {
    match outcome {
        FinalizeOutcome::Applied => {
            shared.stats.finalize_applied.fetch_add(1, Ordering::SeqCst);
            tracing::debug!(event = "idempotency.finalize_applied", key = %key.key, generation, attempt);
            Finalized::Applied
        }
        FinalizeOutcome::Lost => {
            // After an unknown outcome a Lost may mean our own earlier attempt committed.
            shared.stats.finalize_lost.fetch_add(1, Ordering::SeqCst);
            tracing::warn!(
                event = "idempotency.finalize_lost",
                key = %key.key,
                generation,
                attempt,
                "the row expired, was deleted, or belongs to a newer claim; nothing was overwritten"
            );
            Finalized::Lost
        }
    }
}

/// The request that owns a claim, from the handler's response to the terminal row.
struct ClaimOwner<St> {
    shared: Arc<Shared<St>>,
    key: CacheKey,
    generation: i64,
    /// Set when the inline finalize has ended: the heartbeat has nothing left to keep.
    finalized: Arc<AtomicBool>,
}

impl<St: CacheStore> ClaimOwner<St> {
    async fn finalize(&self, write: Write<'_>) -> Finalized {
        let finalized = finalize(&self.shared, &self.key, self.generation, write).await;
        self.finalized.store(true, Ordering::SeqCst);
        finalized
    }

    /// Ends the claim with the handler's response: a non-2xx recorded failed, a 2xx captured
    /// and finalized (in the handler's effect transaction when it took one).
    async fn finish<ResBody>(
        self,
        response: Response<ResBody>,
        scope: &EffectScope<St::Effect>,
    ) -> Response<LiveBody>
    where
        ResBody: Body<Data = Bytes> + Send + 'static,
        ResBody::Error: Into<BoxError>,
    {
        let (parts, body) = response.into_parts();
        let body = boxed(body);
        match parts.status.is_success() {
            #[cfg(feature = "test-seams")]
            success if self.shared.config.behaviour == Behaviour::PreFix => {
                self.finish_pre_fix(parts, body, success).await
            }
            false => {
                // A non-2xx commits nothing (D1): whatever the handler wrote in the effect
                // transaction is rolled back.
                self.abandon(scope.take()).await;
                self.finish_non_success(parts, body).await
            }
            true => match scope.take() {
                Taken::Unused => self.finish_success(parts, body).await,
                Taken::Transaction(effect) => self.finish_success_atomic(parts, body, effect).await,
                Taken::StillLent => {
                    // The handler kept its transaction past its response: the layer cannot
                    // commit it, so it rolls back when the handler drops it; nothing happened.
                    tracing::error!(event = "idempotency.effect_held", key = %self.key.key);
                    self.finalize(Write::Failure(500)).await;
                    problem_response(effect_held_problem())
                }
            },
        }
    }

    /// Rolls back what the handler left in its effect transaction, if anything.
    async fn abandon(&self, taken: Taken<St::Effect>) {
        if let Taken::Transaction(effect) = taken {
            self.shared.store.abandon_effect(effect).await;
        }
    }

    /// A 2xx whose effects are in the effect transaction: the success row is written in it and
    /// both commit at once, before the response is returned; or neither does, and the client is
    /// told so (503, retry with the same key). No drop guard: a client gone before the commit
    /// drops the transaction, so its effects never happened and the key is free after its lease.
    //= specs/idempotency-middleware.md#M1
    //# The handler runs only for the request that won the atomic claim of its key.
    async fn finish_success_atomic(
        self,
        mut parts: http::response::Parts,
        body: BoxBody,
        effect: St::Effect,
    ) -> Response<LiveBody> {
        parts
            .headers
            .insert(REPLAYED_HEADER, HeaderValue::from_static("false"));
        let headers = stored_headers(&parts.headers);
        let capture = capture_up_to_cap(body, self.shared.config.body_bytes_max).await;
        let record = SuccessRecord {
            status: parts.status.as_u16(),
            headers: &headers,
            body: cached_body(&capture, &self.key, self.shared.config.body_bytes_max),
        };
        let finalized =
            finalize_atomic(&self.shared, &self.key, self.generation, effect, record).await;
        self.finalized.store(true, Ordering::SeqCst);
        let retry_after = self.shared.config.retry_after_secs;
        match finalized {
            Finalized::Applied => Response::from_parts(parts, LiveBody::after_capture(capture)),
            Finalized::Lost => claim_lost_problem()
                .to_response_retry_after(retry_after)
                .map(LiveBody::full),
            Finalized::Unknown => commit_unknown_problem()
                .to_response_retry_after(retry_after)
                .map(LiveBody::full),
        }
    }

    //= specs/idempotency-middleware.md#M9
    //# A non-2xx response passes through untouched and its row is recorded failed.
    async fn finish_non_success(
        self,
        parts: http::response::Parts,
        body: BoxBody,
    ) -> Response<LiveBody> {
        self.finalize(Write::Failure(parts.status.as_u16())).await;
        Response::from_parts(parts, LiveBody::passthrough(body))
    }

    //= specs/idempotency-middleware.md#M3
    //# After a 2xx the row ends succeeded with the full body or the sentinel; never failed, never left processing.
    async fn finish_success(
        self,
        mut parts: http::response::Parts,
        body: BoxBody,
    ) -> Response<LiveBody> {
        // insert, not append: a handler-set marker must not survive to confuse the client.
        parts
            .headers
            .insert(REPLAYED_HEADER, HeaderValue::from_static("false"));
        let headers = stored_headers(&parts.headers);
        let status = parts.status.as_u16();
        // Armed before the first await after the 2xx: if the client goes away while we capture
        // or finalize, the guard still finalizes the sentinel.
        let guard = FinalizeGuard::arm(&self, status, headers.clone());
        // Seeded bug (loom only): the guard stops covering the capture and the finalize.
        #[cfg(oncecheck_loom)]
        let guard = if sync::loom_mutation("guard-disarmed-early") {
            guard.disarm();
            FinalizeGuard { armed: None }
        } else {
            guard
        };
        let capture = capture_up_to_cap(body, self.shared.config.body_bytes_max).await;
        let cached = cached_body(&capture, &self.key, self.shared.config.body_bytes_max);
        // Awaited before the response returns: whatever the tail does later, the row is terminal.
        self.finalize(Write::Success(SuccessRecord {
            status,
            headers: &headers,
            body: cached,
        }))
        .await;
        guard.disarm();
        //= specs/idempotency-middleware.md#M7
        //# The first client receives exactly the frames the handler produced, over-cap tail and trailers included.
        Response::from_parts(parts, LiveBody::after_capture(capture))
    }

    /// The code before the body-integrity fix, reproduced for tests: a capped `to_bytes` that
    /// turns any error into an empty body, a finalize error that empties the live body, a
    /// rebuilt response.
    #[cfg(feature = "test-seams")]
    async fn finish_pre_fix(
        self,
        parts: http::response::Parts,
        body: BoxBody,
        success: bool,
    ) -> Response<LiveBody> {
        let cap = self.shared.config.body_bytes_max;
        let bytes = match collect_limited(body, cap + 1).await {
            Ok(bytes) => bytes,
            Err(_) => Bytes::new(),
        };
        let live = if success {
            let cached = if bytes.len() > cap {
                CachedBody::TooLarge
            } else {
                CachedBody::Full(&bytes)
            };
            let headers = stored_headers(&parts.headers);
            let record = SuccessRecord {
                status: parts.status.as_u16(),
                headers: &headers,
                body: cached,
            };
            match self.finalize(Write::Success(record)).await {
                Finalized::Unknown => Bytes::new(),
                _ => bytes.clone(),
            }
        } else {
            self.finalize(Write::Failure(parts.status.as_u16())).await;
            bytes
        };
        let mut builder = Response::builder().status(parts.status);
        for (name, value) in &parts.headers {
            builder = builder.header(name, value);
        }
        if success {
            builder = builder.header(REPLAYED_HEADER, "false");
        }
        builder
            .body(LiveBody::full(live))
            .unwrap_or_else(|_| Response::new(LiveBody::empty()))
    }
}

/// What a success row caches of a captured body: the body when it ended within the cap, the
/// sentinel otherwise.
//= specs/idempotency-middleware.md#M2
//# A cached success holds the complete body, at most the cap, or the too-large sentinel.
fn cached_body<'a>(capture: &'a Capture, key: &CacheKey, cap: usize) -> CachedBody<'a> {
    match capture {
        Capture::Within { data, .. } => {
            assert!(
                data.len() <= cap,
                "M2: a body captured within the cap of {cap} bytes holds {} bytes",
                data.len()
            );
            CachedBody::Full(data)
        }
        Capture::Overflow { .. } => {
            tracing::info!(event = "idempotency.overflow", key = %key.key, cap);
            CachedBody::TooLarge
        }
        Capture::Failed { error, .. } => {
            tracing::warn!(event = "idempotency.body_stream_error", key = %key.key, %error);
            CachedBody::TooLarge
        }
    }
}

/// The atomic finalize: one attempt, the success row and the handler's effects in one commit.
/// It cannot be retried (an error ends the transaction), so an error is an unknown outcome at
/// once; the row then stays `processing` (nothing committed) or is the success (both did).
async fn finalize_atomic<St: CacheStore>(
    shared: &Shared<St>,
    key: &CacheKey,
    generation: i64,
    effect: St::Effect,
    record: SuccessRecord<'_>,
) -> Finalized {
    let now = shared.clock.now_millis();
    let budget = Duration::from_millis(shared.config.finalize_budget_ms);
    let attempt = shared
        .store
        .finalize_succeeded_in(effect, key, generation, record, now);
    let error = match sync::within(budget, attempt).await {
        Some(Ok(FinalizeOutcome::Applied)) => {
            shared.stats.finalize_applied.fetch_add(1, Ordering::SeqCst);
            tracing::debug!(event = "idempotency.finalize_applied", key = %key.key, generation, atomic = true);
            return Finalized::Applied;
        }
        Some(Ok(FinalizeOutcome::Lost)) => {
            shared.stats.finalize_lost.fetch_add(1, Ordering::SeqCst);
            tracing::warn!(
                event = "idempotency.finalize_lost",
                key = %key.key,
                generation,
                atomic = true,
                "the claim was taken over; the handler's effects were rolled back with the row"
            );
            return Finalized::Lost;
        }
        Some(Err(error)) => error.to_string(),
        None => "the commit did not answer within the finalize budget".to_string(),
    };
    shared.stats.finalize_unknown.fetch_add(1, Ordering::SeqCst);
    tracing::warn!(
        event = "idempotency.finalize_unknown",
        key = %key.key,
        generation,
        atomic = true,
        %error,
        "the effects and the row committed together or not at all; a retry with the key learns which"
    );
    Finalized::Unknown
}

/// Finalizes the sentinel if dropped while armed: the client went away after a 2xx, while the
/// body was being captured or finalized. The handler's effects are committed by then, so the
/// row must become a terminal success, never stay `processing` (which a lease would hand to a
/// second execution).
struct FinalizeGuard<St: CacheStore> {
    armed: Option<ArmedGuard<St>>,
}

struct ArmedGuard<St> {
    shared: Arc<Shared<St>>,
    key: CacheKey,
    generation: i64,
    status: u16,
    headers: Vec<(String, String)>,
}

impl<St: CacheStore> FinalizeGuard<St> {
    fn arm(owner: &ClaimOwner<St>, status: u16, headers: Vec<(String, String)>) -> Self {
        #[cfg(feature = "test-seams")]
        if owner.shared.config.mutated(Mutation::NoDropGuard) {
            return FinalizeGuard { armed: None };
        }
        FinalizeGuard {
            armed: Some(ArmedGuard {
                shared: owner.shared.clone(),
                key: owner.key.clone(),
                generation: owner.generation,
                status,
                headers,
            }),
        }
    }

    fn disarm(mut self) {
        self.armed = None;
    }
}

impl<St: CacheStore> Drop for FinalizeGuard<St> {
    fn drop(&mut self) {
        let Some(armed) = self.armed.take() else {
            return;
        };
        armed
            .shared
            .stats
            .guard_fired
            .fetch_add(1, Ordering::SeqCst);
        tracing::warn!(event = "idempotency.cancel_guard_fired", key = %armed.key.key, generation = armed.generation);
        let key = armed.key.key.clone();
        let spawned = sync::spawn_detached(async move {
            let record = SuccessRecord {
                status: armed.status,
                headers: &armed.headers,
                body: CachedBody::TooLarge,
            };
            // The guard's finalize keeps the claim's lease like the request's did: the claim is
            // still this process's until the sentinel is written.
            let finalized = Arc::new(AtomicBool::new(false));
            let heartbeat =
                Heartbeat::for_claim(&armed.shared, &armed.key, armed.generation, &finalized);
            let work = async {
                finalize(
                    &armed.shared,
                    &armed.key,
                    armed.generation,
                    Write::Success(record),
                )
                .await;
                finalized.store(true, Ordering::SeqCst);
            };
            match heartbeat {
                Some(heartbeat) => with_heartbeat(heartbeat, work).await,
                None => work.await,
            }
        });
        if !spawned {
            tracing::error!(event = "idempotency.cancel_guard_no_runtime", key = %key, "row stays processing until its lease expires");
        }
    }
}

#[cfg(all(test, not(oncecheck_shuttle), not(oncecheck_loom)))]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::store::MemoryStore;

    fn key() -> CacheKey {
        CacheKey {
            scope: String::new(),
            method: "POST".into(),
            path: "/transfers".into(),
            key: "k".into(),
        }
    }

    #[test]
    fn a_sentinel_replay_is_a_marked_problem_with_the_original_status() {
        let stored = StoredResponse {
            status: 201,
            headers: vec![("x-a".into(), "1".into())],
            body: StoredBody::TooLarge,
        };
        let response = replay_response(stored, 1024, true);
        assert_eq!(response.status(), StatusCode::CREATED);
        assert_eq!(response.headers()[REPLAYED_HEADER], "true");
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json"
        );
        assert!(
            response.headers().get("x-a").is_none(),
            "headers of a body not stored are not replayed"
        );
    }

    #[test]
    fn stored_headers_drop_framing_and_the_marker_but_keep_repeats() {
        let mut headers = HeaderMap::new();
        headers.insert("content-length", "3".parse().unwrap());
        headers.insert(REPLAYED_HEADER, "false".parse().unwrap());
        headers.append("set-cookie", "a=1".parse().unwrap());
        headers.append("set-cookie", "b=2".parse().unwrap());
        let stored = stored_headers(&headers);
        assert_eq!(
            stored,
            vec![
                ("set-cookie".to_string(), "a=1".to_string()),
                ("set-cookie".to_string(), "b=2".to_string())
            ]
        );
    }

    #[tokio::test]
    async fn a_full_body_over_the_cap_is_stored_as_the_sentinel() {
        let store = MemoryStore::new();
        let layer = IdempotencyLayer::builder(store.clone())
            .body_bytes_max(4)
            .clock(ManualClock::new(0))
            .build();
        let claim = ClaimRequest {
            key: &key(),
            fingerprint: &Fingerprint([0; 32]),
            now_millis: 0,
            lease_millis: 1000,
            row_ttl_millis: 10_000,
            take_over_lapsed: true,
        };
        let ClaimOutcome::Claimed { generation } = store.claim(claim).await.unwrap() else {
            panic!("claimed")
        };
        let record = SuccessRecord {
            status: 200,
            headers: &[],
            body: CachedBody::Full(b"too long"),
        };
        let finalized = finalize(&layer.shared, &key(), generation, Write::Success(record)).await;
        assert_eq!(finalized, Finalized::Applied);
        let row = store.row(&key()).unwrap();
        assert_eq!(row.response.unwrap().body, StoredBody::TooLarge);
    }

    fn claim_k(store: &MemoryStore) {
        let claim = ClaimRequest {
            key: &key(),
            fingerprint: &Fingerprint([0; 32]),
            now_millis: 0,
            lease_millis: 1000,
            row_ttl_millis: 10_000,
            take_over_lapsed: true,
        };
        assert_eq!(
            futures_util::FutureExt::now_or_never(store.claim(claim))
                .unwrap()
                .unwrap(),
            ClaimOutcome::Claimed { generation: 1 }
        );
    }

    #[tokio::test]
    async fn a_finalize_without_a_row_is_lost_and_errors_are_retried_after_a_backoff() {
        let store = MemoryStore::new();
        let layer = IdempotencyLayer::builder(store.clone())
            .clock(ManualClock::new(0))
            .build();
        let finalized = finalize(&layer.shared, &key(), 1, Write::Failure(500)).await;
        assert_eq!(finalized, Finalized::Lost);
        claim_k(&store);
        store.fail_next_finalizes(2);
        let started = std::time::Instant::now();
        let finalized = finalize(&layer.shared, &key(), 1, Write::Failure(500)).await;
        assert_eq!(finalized, Finalized::Applied, "the third attempt applies");
        assert_eq!(layer.stats().finalize_retries, 2);
        // Backoffs are drawn from the upper half of 25 ms and 50 ms: at least 12 + 25 ms passed.
        assert!(
            started.elapsed() >= Duration::from_millis(37),
            "the retries were not back to back"
        );
    }

    #[tokio::test]
    async fn a_finalize_that_keeps_failing_is_unknown_after_its_attempts() {
        let store = MemoryStore::new();
        let layer = IdempotencyLayer::builder(store.clone())
            .clock(ManualClock::new(0))
            .build();
        claim_k(&store);
        store.fail_next_finalizes(5);
        let finalized = finalize(&layer.shared, &key(), 1, Write::Failure(500)).await;
        assert_eq!(finalized, Finalized::Unknown);
        assert_eq!(layer.stats().finalize_unknown, 1);
        assert_eq!(store.round_trips(), 1 + 5, "the claim and five attempts");
    }

    #[tokio::test]
    async fn the_finalize_budget_stops_the_retries() {
        let store = MemoryStore::new();
        // The second attempt waits 40..=80 ms, the third would wait 80..=160 ms more: past 100 ms.
        let layer = IdempotencyLayer::builder(store.clone())
            .clock(ManualClock::new(0))
            .finalize_budget_ms(100)
            .finalize_backoff_ms(80)
            .build();
        claim_k(&store);
        store.fail_next_finalizes(5);
        let finalized = finalize(&layer.shared, &key(), 1, Write::Failure(500)).await;
        assert_eq!(finalized, Finalized::Unknown);
        assert_eq!(store.round_trips(), 1 + 2, "two attempts fit the budget");
        assert_eq!(layer.stats().finalize_retries, 1);
    }

    #[test]
    fn backoffs_double_and_stay_in_their_upper_half() {
        let config = Config {
            finalize_backoff_ms: 100,
            ..Config::default()
        };
        for _ in 0..50 {
            let second = finalize_backoff(&config, 2);
            let third = finalize_backoff(&config, 3);
            assert!(
                (Duration::from_millis(50)..=Duration::from_millis(100)).contains(&second),
                "{second:?}"
            );
            assert!(
                (Duration::from_millis(100)..=Duration::from_millis(200)).contains(&third),
                "{third:?}"
            );
        }
    }

    #[test]
    #[should_panic(expected = "must be shorter than the lease")]
    fn a_renew_interval_as_long_as_the_lease_is_refused() {
        let _ = IdempotencyLayer::builder(MemoryStore::new())
            .lease_secs(3)
            .lease_renew_interval(Duration::from_secs(3))
            .build();
    }

    #[test]
    fn the_default_heartbeat_is_a_third_of_the_lease() {
        let layer = IdempotencyLayer::builder(MemoryStore::new())
            .lease_secs(90)
            .build();
        assert_eq!(
            layer.config().lease_renew_interval,
            Some(Duration::from_secs(30))
        );
        let off = IdempotencyLayer::builder(MemoryStore::new())
            .without_lease_renewal()
            .build();
        assert_eq!(off.config().lease_renew_interval, None);
    }

    /// The `event` field of every event logged while it is the default subscriber.
    #[derive(Clone, Default)]
    struct EventNames(Arc<std::sync::Mutex<Vec<String>>>);

    impl EventNames {
        fn names(&self) -> Vec<String> {
            self.0.lock().unwrap().clone()
        }
    }

    struct EventField<'a>(&'a mut Option<String>);

    impl tracing::field::Visit for EventField<'_> {
        fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
            if field.name() == "event" {
                *self.0 = Some(value.to_string());
            }
        }

        fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
    }

    impl tracing::Subscriber for EventNames {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            let mut name = None;
            event.record(&mut EventField(&mut name));
            if let Some(name) = name {
                self.0.lock().unwrap().push(name);
            }
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    fn armed_guard(layer: &IdempotencyLayer<MemoryStore>) -> FinalizeGuard<MemoryStore> {
        let owner = ClaimOwner {
            shared: layer.shared.clone(),
            key: key(),
            generation: 1,
            finalized: Arc::new(AtomicBool::new(false)),
        };
        FinalizeGuard::arm(&owner, 200, Vec::new())
    }

    /// A guard dropped where no runtime can finalize for it cannot write the sentinel: the
    /// operator is told (the row stays processing until its lease runs out), and only then.
    #[test]
    fn a_guard_dropped_without_a_runtime_says_it_could_not_finalize() {
        let store = MemoryStore::new();
        claim_k(&store);
        let layer = IdempotencyLayer::builder(store.clone())
            .clock(ManualClock::new(0))
            .build();
        let events = EventNames::default();
        tracing::subscriber::with_default(events.clone(), || drop(armed_guard(&layer)));
        assert_eq!(
            events.names(),
            [
                "idempotency.cancel_guard_fired",
                "idempotency.cancel_guard_no_runtime"
            ]
        );
        assert_eq!(layer.stats().guard_fired, 1);

        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let events = EventNames::default();
        tracing::subscriber::with_default(events.clone(), || {
            runtime.block_on(async {
                drop(armed_guard(&layer));
                for _ in 0..1000 {
                    if layer.stats().finalize_applied == 1 {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
        });
        assert_eq!(
            layer.stats().finalize_applied,
            1,
            "the guard's finalize ran"
        );
        assert!(
            !events
                .names()
                .contains(&"idempotency.cancel_guard_no_runtime".to_string()),
            "{:?}",
            events.names()
        );
    }
}
