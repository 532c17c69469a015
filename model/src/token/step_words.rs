//! One step in the protocol's words, for traces, the HTML report and the Explorer: the request a
//! client sends (its DynamoDB call and token), what the server does with it, what reaches the
//! client, and what the clock and the environment do to the token records.
//!
//! Invariants: clients are `C1`, `C2` and their tokens `t1`, `t2` (numbered from 1), accounts
//! are letters, hosts are named only when two can be told apart.

use super::*;

/// The step's vocabulary, read from the states before and after it.
struct Words<'a> {
    model: &'a TokenModel,
    before: &'a TokenState,
    after: &'a TokenState,
}

pub(super) fn describe(
    model: &TokenModel,
    before: &TokenState,
    action: &Action,
    after: &TokenState,
) -> String {
    let words = Words {
        model,
        before,
        after,
    };
    match action {
        Action::ClientSends { .. }
        | Action::ClientRetries { .. }
        | Action::ClientReads { .. }
        | Action::ResponseDelivered { .. }
        | Action::ResponseLost { .. } => words.client_step(action),
        Action::ServerBegins { .. }
        | Action::ServerCommits { .. }
        | Action::ServerReplays { .. }
        | Action::ServerRejects { .. } => words.server_step(action),
        Action::ClockTicks | Action::RecordLosesTimestamp { .. } => words.environment_step(action),
    }
}

impl Words<'_> {
    fn who(&self, client: &ClientId) -> String {
        format!("C{}", client + 1)
    }

    fn token(&self, client: &ClientId) -> String {
        format!(
            "t{}",
            self.model.token_of(self.before, *client as usize) + 1
        )
    }

    fn accounts(&self) -> String {
        let accounts: Vec<String> = (0..ACCOUNTS)
            .map(|item| ((b'A' + item) as char).to_string())
            .collect();
        accounts.join(", ")
    }

    fn request(&self, client: &ClientId, rebuilt: bool) -> String {
        let amount = if rebuilt { 6 } else { 5 };
        match self.before.clients[*client as usize].pattern {
            Pattern::AddCounter => "UpdateItem{ADD counter 5}".to_string(),
            Pattern::PutFixedProfile => {
                format!("PutItem{{profile = {}'s fixed item}}", self.who(client))
            }
            Pattern::CreateOrderIfAbsent => {
                format!(
                    "PutItem{{order owner={}}} if attribute_not_exists(order)",
                    self.who(client)
                )
            }
            Pattern::TransactWithoutToken => {
                format!(
                    "TransactWriteItems{{ADD balance {amount} on {}}} without token",
                    self.accounts()
                )
            }
            Pattern::TransactWithToken => format!(
                "TransactWriteItems{{ADD balance {amount} on {}}} token {}",
                self.accounts(),
                self.token(client)
            ),
        }
    }

    /// Only named when there are two hosts to tell apart.
    fn via(&self, host: Host) -> String {
        if self.model.limits.skew > 0 {
            format!(
                " via H{} (its clock reads {})",
                host + 1,
                self.model.host_clock(host, self.before.now)
            )
        } else {
            String::new()
        }
    }

    fn attempt_of(&self, client: &ClientId, attempt: &u8) -> &Attempt {
        &self.before.clients[*client as usize].attempts[*attempt as usize]
    }

    fn label(&self, client: &ClientId, attempt: &u8) -> String {
        if self.before.clients[*client as usize].pattern.has_token() {
            format!(
                "{} (attempt {} of {})",
                self.token(client),
                attempt + 1,
                self.who(client)
            )
        } else {
            format!("{}'s attempt {}", self.who(client), attempt + 1)
        }
    }

    fn client_step(&self, action: &Action) -> String {
        match action {
            Action::ClientSends {
                client,
                host,
                token_too_long,
            } => {
                let long = if *token_too_long {
                    format!(
                        " (its token is {} characters: over the limit)",
                        TOKEN_CHARS_MAX + 1
                    )
                } else {
                    String::new()
                };
                format!(
                    "{} sends {}{long}{}",
                    self.who(client),
                    self.request(client, false),
                    self.via(*host)
                )
            }
            Action::ClientRetries {
                client,
                rebuilt,
                host,
            } => {
                let pattern = self.before.clients[*client as usize].pattern;
                let how = match (pattern.has_token(), rebuilt) {
                    (true, false) => {
                        format!("with token {} (identical request)", self.token(client))
                    }
                    (true, true) => format!(
                        "with token {} but rebuilt parameters: {}",
                        self.token(client),
                        self.request(client, true)
                    ),
                    (false, _) => format!("without a token: {}", self.request(client, false)),
                };
                format!("{} retries {how}{}", self.who(client), self.via(*host))
            }
            Action::ResponseDelivered { client, attempt } => {
                let answer = self
                    .attempt_of(client, attempt)
                    .answer()
                    .expect("only answered attempts are delivered");
                format!(
                    "{} receives {answer:?} for attempt {}",
                    self.who(client),
                    attempt + 1
                )
            }
            Action::ResponseLost { client, attempt } => {
                match self.attempt_of(client, attempt).server {
                    ServerSide::Pending => {
                        format!(
                            "{} times out on attempt {} (request still in flight)",
                            self.who(client),
                            attempt + 1
                        )
                    }
                    _ => format!(
                        "response to {} lost (attempt {})",
                        self.who(client),
                        attempt + 1
                    ),
                }
            }
            Action::ClientReads { client } => {
                let seen = self.after.clients[*client as usize]
                    .reconciled
                    .clone()
                    .unwrap_or_default();
                format!(
                    "{} reads its items back to reconcile: its write visible {seen:?} times per item",
                    self.who(client)
                )
            }
            _ => unreachable!("not a client's step: {action:?}"),
        }
    }

    fn server_step(&self, action: &Action) -> String {
        match action {
            Action::ServerBegins { client, attempt } => {
                let token_note = if self.before.clients[*client as usize].pattern.has_token() {
                    format!(", records {} as running", self.token(client))
                } else {
                    String::new()
                };
                format!(
                    "server starts {}: locks {}{token_note}",
                    self.label(client, attempt),
                    self.accounts()
                )
            }
            Action::ServerCommits { client, attempt } => {
                let done = matches!(
                    self.after.clients[*client as usize].attempts[*attempt as usize].server,
                    ServerSide::Done { .. }
                );
                if done {
                    format!("server commits {}", self.label(client, attempt))
                } else {
                    format!(
                        "server makes one item of {} visible, the rest still pending",
                        self.label(client, attempt)
                    )
                }
            }
            Action::ServerReplays { client, attempt } => {
                if self.before.clients[*client as usize].pattern.has_token() {
                    format!(
                        "server finds {} live: answers success for {}, applies nothing",
                        self.token(client),
                        self.label(client, attempt)
                    )
                } else {
                    format!(
                        "server answers {} from an earlier request's receipt, applies nothing",
                        self.label(client, attempt)
                    )
                }
            }
            Action::ServerRejects {
                client,
                attempt,
                answer,
            } => {
                format!("server rejects {}: {answer:?}", self.label(client, attempt))
            }
            _ => unreachable!("not a server's step: {action:?}"),
        }
    }

    fn environment_step(&self, action: &Action) -> String {
        match action {
            Action::ClockTicks => {
                let expired: Vec<String> = self
                    .before
                    .tokens
                    .keys()
                    .filter(|client| !self.after.tokens.contains_key(client))
                    .map(|client| self.token(client))
                    .collect();
                if expired.is_empty() {
                    format!("clock ticks to {}", self.after.now)
                } else {
                    format!(
                        "clock passes the 10-minute window of {} (now {})",
                        expired.join(", "),
                        self.after.now
                    )
                }
            }
            Action::RecordLosesTimestamp { token: owner } => {
                format!(
                    "the record of token {} loses its valid creation timestamp",
                    self.token(owner)
                )
            }
            _ => unreachable!("not the environment's step: {action:?}"),
        }
    }
}
