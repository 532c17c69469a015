//! SigV4 re-signing of what the proxy forwards, so that a replay or a probe can reach a real
//! DynamoDB table and not only an emulator.
//!
//! The proxy rewrites bodies (a Query without its Limit, its own image reads and scans) and
//! forwards to a host other than the one the client signed for, so the client's signature never
//! fits what goes upstream. When signing is on, every upstream request drops the client's
//! signing headers and is signed afresh by the AWS SDK's own signer (`aws-sigv4`), with
//! credentials from the standard provider chain (environment, profile, SSO, web identity,
//! container and instance roles) and the region the endpoint names.
//!
//! When: [`SigningMode`], from `ONCECHECK_SIGV4` (`auto`, the default; `on`; `off`). `auto`
//! signs exactly when the upstream is AWS itself (an `https` URL whose host ends in
//! `.amazonaws.com` or `.amazonaws.com.cn`). A plain `http://127.0.0.1` emulator is forwarded
//! unsigned-as-received: moto and DynamoDB Local ignore signatures, but moto files a request
//! under the account its Authorization header's access key names, and the client's header keeps
//! the replay's table in the account the replay's own clients use; re-signing with the chain's
//! credentials would also hand a developer's real access key id to a local emulator for nothing.
//! `on` signs for any endpoint (the test against moto does, to show the signed request is still
//! answered).
//!
//! Invariants:
//! - **The signed headers are the forwarded headers**: what is signed is exactly the method,
//!   path, body bytes and header set that go upstream, with the Host header the URL gives, so
//!   nothing between signing and sending may change them (the caller sends what it signed).
//! - **Temporary credentials carry their token**: a session token is sent as
//!   `X-Amz-Security-Token` and included in the signature, as DynamoDB requires.
//! - **Credentials are not logged**: errors name the provider's failure, never a key.

use std::borrow::Cow;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, SignableBody, SignableRequest, SigningSettings,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Uri};

use super::error_chain::error_chain;

/// The environment variable that switches signing: `auto` (default), `on` or `off`.
pub const SIGV4_ENV: &str = "ONCECHECK_SIGV4";
/// The name DynamoDB's requests are signed for.
pub const DYNAMODB_SERVICE: &str = "dynamodb";
/// The region when neither the endpoint nor the standard chain names one (as the store's clients).
pub const REGION_FALLBACK: &str = "us-east-1";
/// Credentials closer than this to their expiry are fetched again before signing, so a request
/// never leaves with credentials that lapse in flight.
pub const CREDENTIALS_REFRESH_SECS_BEFORE_EXPIRY: u64 = 300;

/// Headers the signature produces; a client's are dropped before re-signing.
pub const SIGNATURE_HEADERS: [&str; 4] = [
    "authorization",
    "x-amz-date",
    "x-amz-security-token",
    "x-amz-content-sha256",
];

#[derive(Debug, thiserror::Error)]
pub enum SigningError {
    #[error("{SIGV4_ENV}={0:?}: expected auto, on or off")]
    BadMode(String),
    #[error("cannot sign for {url:?}: {detail}")]
    BadUrl { url: String, detail: String },
    #[error("no AWS credentials for signing: {0} (set them through the standard chain: AWS_PROFILE, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN, SSO, or an instance role)")]
    NoCredentials(String),
    #[error("signing failed: {0}")]
    Signing(String),
}

/// Whether the proxy re-signs what it forwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SigningMode {
    /// Sign exactly when the upstream is AWS itself ([`is_aws_endpoint`]).
    Auto,
    On,
    Off,
}

impl SigningMode {
    pub fn parse(text: &str) -> Result<SigningMode, SigningError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(SigningMode::Auto),
            "on" | "1" | "true" => Ok(SigningMode::On),
            "off" | "0" | "false" => Ok(SigningMode::Off),
            _ => Err(SigningError::BadMode(text.to_owned())),
        }
    }

    /// The mode `ONCECHECK_SIGV4` sets (`auto` when unset).
    pub fn from_env() -> Result<SigningMode, SigningError> {
        match std::env::var(SIGV4_ENV) {
            Ok(text) => SigningMode::parse(&text),
            Err(_) => Ok(SigningMode::Auto),
        }
    }

    /// Whether requests to `url` are signed under this mode.
    pub fn signs(self, url: &str) -> bool {
        match self {
            SigningMode::On => true,
            SigningMode::Off => false,
            SigningMode::Auto => is_aws_endpoint(url),
        }
    }
}

/// Whether `url` is an AWS endpoint: `https` and a host under `amazonaws.com(.cn)`.
pub fn is_aws_endpoint(url: &str) -> bool {
    let Ok(uri) = url.parse::<Uri>() else {
        return false;
    };
    let host = uri.host().unwrap_or("").to_ascii_lowercase();
    uri.scheme_str() == Some("https")
        && (host.ends_with(".amazonaws.com") || host.ends_with(".amazonaws.com.cn"))
}

/// The region a regional DynamoDB endpoint names: `dynamodb.eu-west-1.amazonaws.com` (and the
/// FIPS and dual-stack forms, `dynamodb-fips.<region>...`, `dynamodb.<region>.api.aws`).
pub fn region_of_endpoint(url: &str) -> Option<String> {
    let uri = url.parse::<Uri>().ok()?;
    let host = uri.host()?.to_ascii_lowercase();
    let labels: Vec<&str> = host.split('.').collect();
    let named = labels.len() >= 3
        && labels[0].starts_with(DYNAMODB_SERVICE)
        && (host.ends_with(".amazonaws.com")
            || host.ends_with(".amazonaws.com.cn")
            || host.ends_with(".api.aws"));
    named.then(|| labels[1].to_owned())
}

/// The Host header a client sends for `url`: the authority without a default port (what the
/// signer derives and what the HTTP client sends, written down once so they cannot differ).
pub fn host_header(url: &str) -> Result<String, SigningError> {
    let bad = |detail: &str| SigningError::BadUrl {
        url: url.to_owned(),
        detail: detail.to_owned(),
    };
    let uri = url
        .parse::<Uri>()
        .map_err(|error| bad(&error.to_string()))?;
    let host = uri.host().ok_or_else(|| bad("no host"))?;
    let default_port = match uri.scheme_str() {
        Some("http") => 80,
        Some("https") => 443,
        _ => return Err(bad("not http(s)")),
    };
    Ok(match uri.port_u16() {
        Some(port) if port != default_port => format!("{host}:{port}"),
        _ => host.to_owned(),
    })
}

/// Where a signature is valid: the credential scope's region and service, and whether the body's
/// hash travels as `X-Amz-Content-SHA256` (S3 wants it; DynamoDB does not, and the SDK does not
/// send it to DynamoDB).
#[derive(Clone, Copy, Debug)]
pub struct SigningScope<'a> {
    pub region: &'a str,
    pub service: &'a str,
    pub body_hash_header: bool,
}

/// Signs one request: answers the headers to add to it, in the signer's order (`x-amz-date`,
/// `authorization`, then `x-amz-content-sha256` and `x-amz-security-token` when they apply).
/// `url` is the full request URL; `headers` are every header that will be sent (including
/// Host), none of them a [`SIGNATURE_HEADERS`] entry.
pub fn sign_request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    credentials: &Credentials,
    scope: SigningScope<'_>,
    time: SystemTime,
) -> Result<Vec<(String, String)>, SigningError> {
    let identity: Identity = credentials.clone().into();
    let mut settings = SigningSettings::default();
    if scope.body_hash_header {
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    }
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(scope.region)
        .name(scope.service)
        .time(time)
        .settings(settings)
        .build()
        .map_err(|error| SigningError::Signing(error.to_string()))?;
    let request = SignableRequest::new(
        method,
        Cow::Borrowed(url),
        headers.iter().copied(),
        SignableBody::Bytes(body),
    )
    .map_err(|error| SigningError::Signing(error.to_string()))?;
    let (instructions, _signature) = sign(request, &params.into())
        .map_err(|error| SigningError::Signing(error.to_string()))?
        .into_parts();
    let (added, query) = instructions.into_parts();
    // Header signing never adds query parameters; a signer that did would change the URL after
    // it was signed.
    assert!(query.is_empty(), "header signing added query parameters");
    Ok(added
        .into_iter()
        .map(|header| (header.name().to_owned(), header.value().to_owned()))
        .collect())
}

/// Signs the proxy's upstream requests for one endpoint with the standard chain's credentials.
pub struct Signer {
    region: String,
    provider: SharedCredentialsProvider,
    /// The last credentials fetched, reused until they near their expiry (the chain's providers
    /// may each cost a network round trip: SSO, STS, the instance metadata service).
    cached: Mutex<Option<Credentials>>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Signer")
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// A signer for `url`: region from the endpoint's host, else the standard region chain
    /// (`AWS_REGION`, the profile), else [`REGION_FALLBACK`]; credentials from the standard chain.
    pub async fn from_environment(url: &str) -> Result<Signer, SigningError> {
        let region = match region_of_endpoint(url) {
            Some(region) => region,
            None => aws_config::default_provider::region::DefaultRegionChain::builder()
                .build()
                .region()
                .await
                .map_or_else(|| REGION_FALLBACK.to_owned(), |region| region.to_string()),
        };
        let chain = aws_config::default_provider::credentials::DefaultCredentialsChain::builder()
            .region(aws_config::Region::new(region.clone()))
            .build()
            .await;
        Ok(Signer::with_provider(
            region,
            SharedCredentialsProvider::new(chain),
        ))
    }

    /// A signer with a given credentials provider (tests; a caller with its own chain).
    pub fn with_provider(region: String, provider: SharedCredentialsProvider) -> Signer {
        Signer {
            region,
            provider,
            cached: Mutex::new(None),
        }
    }

    pub fn region(&self) -> &str {
        &self.region
    }

    async fn credentials(&self) -> Result<Credentials, SigningError> {
        let fresh_until =
            SystemTime::now() + Duration::from_secs(CREDENTIALS_REFRESH_SECS_BEFORE_EXPIRY);
        {
            let cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(credentials) = cached.as_ref() {
                if credentials
                    .expiry()
                    .is_none_or(|expiry| expiry > fresh_until)
                {
                    return Ok(credentials.clone());
                }
            }
        }
        let credentials = self
            .provider
            .provide_credentials()
            .await
            .map_err(|error| SigningError::NoCredentials(one_line(&error_chain(&error))))?;
        *self.cached.lock().unwrap_or_else(PoisonError::into_inner) = Some(credentials.clone());
        Ok(credentials)
    }

    /// Signs a POST of `body` to `url` with `headers` (the forwarded set, without Host or any
    /// [`SIGNATURE_HEADERS`] entry): answers the headers to send, Host and the signature
    /// headers added.
    pub async fn sign_post(
        &self,
        url: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<HeaderMap, SigningError> {
        let credentials = self.credentials().await?;
        let host = host_header(url)?;
        let mut text: Vec<(&str, &str)> = Vec::with_capacity(headers.len() + 1);
        text.push(("host", host.as_str()));
        for (name, value) in headers {
            assert!(
                !SIGNATURE_HEADERS.contains(&name.as_str()) && name.as_str() != "host",
                "{name} must be dropped before signing"
            );
            let value = value.to_str().map_err(|_| {
                SigningError::Signing(format!("header {name} is not visible ASCII"))
            })?;
            text.push((name.as_str(), value));
        }
        let scope = SigningScope {
            region: &self.region,
            service: DYNAMODB_SERVICE,
            body_hash_header: false,
        };
        let added = sign_request(
            "POST",
            url,
            &text,
            body,
            &credentials,
            scope,
            SystemTime::now(),
        )?;
        let mut signed = headers.clone();
        let header = |name: &str, value: &str| -> Result<(HeaderName, HeaderValue), SigningError> {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|error| SigningError::Signing(error.to_string()))?;
            let value = HeaderValue::from_str(value)
                .map_err(|error| SigningError::Signing(format!("{name}: {error}")))?;
            Ok((name, value))
        };
        let (name, value) = header("host", &host)?;
        signed.insert(name, value);
        for (name, value) in &added {
            let (name, mut value) = header(name, value)?;
            if name.as_str() == "x-amz-security-token" {
                value.set_sensitive(true);
            }
            signed.insert(name, value);
        }
        Ok(signed)
    }
}

/// The chain's error lists every provider it tried, one per line; an error is one line.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_credential_types::provider::error::CredentialsError;
    use aws_credential_types::provider::future;

    #[derive(Debug)]
    struct NoCredentials;

    impl ProvideCredentials for NoCredentials {
        fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            future::ProvideCredentials::ready(Err(CredentialsError::not_loaded(
                "no credentials found in chain. Attempted:\n  Environment: not set\n  Profile: none",
            )))
        }
    }

    #[tokio::test]
    async fn missing_credentials_are_one_clear_line_and_nothing_is_signed() {
        let signer = Signer::with_provider(
            "us-east-1".to_owned(),
            SharedCredentialsProvider::new(NoCredentials),
        );
        let error = signer
            .sign_post("http://127.0.0.1:1/", &HeaderMap::new(), b"{}")
            .await
            .unwrap_err();
        let text = error.to_string();
        assert!(!text.contains('\n'), "{text}");
        assert!(
            text.starts_with("no AWS credentials for signing: ")
                && text.contains("Attempted:; Environment: not set; Profile: none"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn temporary_credentials_carry_their_token_into_the_signature() {
        let credentials =
            Credentials::new("AKID", "secret", Some("the-token".into()), None, "test");
        let signer = Signer::with_provider(
            "eu-west-1".to_owned(),
            SharedCredentialsProvider::new(credentials),
        );
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-amz-target",
            HeaderValue::from_static("DynamoDB_20120810.Query"),
        );
        let signed = signer
            .sign_post("http://127.0.0.1:8000/", &headers, b"{}")
            .await
            .unwrap();
        assert_eq!(signed["host"], "127.0.0.1:8000");
        assert_eq!(signed["x-amz-security-token"], "the-token");
        let authorization = signed["authorization"].to_str().unwrap();
        assert!(
            authorization.contains("/eu-west-1/dynamodb/aws4_request, SignedHeaders=host;x-amz-date;x-amz-security-token;x-amz-target, Signature="),
            "{authorization}"
        );
    }

    #[test]
    fn auto_signs_aws_endpoints_only() {
        let aws = "https://dynamodb.eu-west-1.amazonaws.com";
        let moto = "http://127.0.0.1:4566";
        assert!(SigningMode::Auto.signs(aws));
        assert!(SigningMode::Auto.signs("https://dynamodb.cn-north-1.amazonaws.com.cn"));
        assert!(!SigningMode::Auto.signs(moto));
        // Plain http to an AWS name is not AWS (AWS answers https only): not signed by default.
        assert!(!SigningMode::Auto.signs("http://dynamodb.eu-west-1.amazonaws.com"));
        assert!(!SigningMode::Auto.signs("https://amazonaws.com.example.org"));
        assert!(SigningMode::On.signs(moto));
        assert!(!SigningMode::Off.signs(aws));
    }

    #[test]
    fn modes_parse_and_bad_ones_are_refused() {
        assert_eq!(SigningMode::parse("").unwrap(), SigningMode::Auto);
        assert_eq!(SigningMode::parse("ON").unwrap(), SigningMode::On);
        assert_eq!(SigningMode::parse("off").unwrap(), SigningMode::Off);
        let error = SigningMode::parse("sometimes").unwrap_err();
        assert_eq!(
            error.to_string(),
            "ONCECHECK_SIGV4=\"sometimes\": expected auto, on or off"
        );
    }

    #[test]
    fn the_region_comes_from_a_regional_endpoint() {
        assert_eq!(
            region_of_endpoint("https://dynamodb.ap-south-2.amazonaws.com").as_deref(),
            Some("ap-south-2")
        );
        assert_eq!(
            region_of_endpoint("https://dynamodb-fips.us-gov-west-1.amazonaws.com/").as_deref(),
            Some("us-gov-west-1")
        );
        assert_eq!(region_of_endpoint("http://127.0.0.1:8000"), None);
        assert_eq!(
            region_of_endpoint("https://s3.eu-west-1.amazonaws.com"),
            None
        );
    }

    #[test]
    fn the_host_header_drops_default_ports_only() {
        assert_eq!(
            host_header("http://127.0.0.1:4566/").unwrap(),
            "127.0.0.1:4566"
        );
        assert_eq!(host_header("http://localhost:80").unwrap(), "localhost");
        assert_eq!(
            host_header("https://dynamodb.us-east-1.amazonaws.com:443").unwrap(),
            "dynamodb.us-east-1.amazonaws.com"
        );
        assert!(host_header("ftp://example.org").is_err());
    }
}
