//! The token model's state role by role in the step text's words, for the HTML report's
//! "changed" column and the Explorer's picture: clients `C1`, their attempts numbered from 1,
//! tokens `t1`, accounts `A`, `B`, hosts `H1`, `H2` (named only when their clocks can differ, as
//! the step text names them), answers by their DynamoDB names.
//!
//! Invariants: no Rust `Debug` text in any role or value; a role that holds nothing (no
//! reconciliation, no damage left, a token never recorded) is absent; each attempt is one role,
//! so a step's changes name the attempt it moved.

use super::{
    Answer, Attempt, ClientSide, Pattern, ServerSide, TokenModel, TokenPhase, TokenState, ACCOUNTS,
};
use crate::view::element_name;

fn account(item: usize) -> char {
    (b'A' + item as u8) as char
}

/// What a client writes, as the step text's request names it.
fn pattern_words(pattern: Pattern) -> &'static str {
    match pattern {
        Pattern::TransactWithoutToken => {
            "TransactWriteItems{ADD balance 5 on each account} without a token"
        }
        Pattern::TransactWithToken => {
            "TransactWriteItems{ADD balance 5 on each account} with its token"
        }
        Pattern::AddCounter => "UpdateItem{ADD counter 5}",
        Pattern::PutFixedProfile => "PutItem{its fixed profile item}",
        Pattern::CreateOrderIfAbsent => "PutItem{order} if attribute_not_exists(order)",
    }
}

fn answer_words(answer: Answer) -> &'static str {
    match answer {
        Answer::Success => "success",
        Answer::ConditionalCheckFailed => "ConditionalCheckFailed",
        Answer::IdempotentParameterMismatch => "IdempotentParameterMismatch",
        Answer::TransactionInProgress => "TransactionInProgress",
        Answer::TransactionConflict => "TransactionConflict",
        Answer::ValidationError => "ValidationError",
        Answer::InternalServerError => "InternalServerError",
    }
}

/// One attempt: how it was sent, what the server did, what the client saw.
fn attempt_words(model: &TokenModel, attempt: &Attempt) -> String {
    let host = if model.limits.skew > 0 {
        format!(" via H{}", attempt.host + 1)
    } else {
        String::new()
    };
    let rebuilt = if attempt.rebuilt {
        ", rebuilt parameters"
    } else {
        ""
    };
    let server = match attempt.server {
        ServerSide::Pending => "on its way".to_string(),
        ServerSide::Running { items_applied, .. } => match items_applied {
            0 => "running, holding the accounts".to_string(),
            applied => format!("running, {applied} items applied"),
        },
        ServerSide::Done {
            answer, applied, ..
        } => format!(
            "answered {}, {}",
            answer_words(answer),
            if applied {
                "applied"
            } else {
                "changed nothing"
            }
        ),
        ServerSide::Dropped => "dropped unprocessed".to_string(),
    };
    let client = match attempt.client {
        ClientSide::Waiting => "client waiting",
        ClientSide::Delivered => "answer delivered",
        ClientSide::GaveUp => "client gave up",
    };
    format!(
        "sent at tick {}{host}{rebuilt}; {server}; {client}",
        attempt.sent_at
    )
}

/// The state by role.
pub(super) fn roles(model: &TokenModel, state: &TokenState) -> Vec<(String, String)> {
    let mut roles = Vec::new();
    for (index, client) in state.clients.iter().enumerate() {
        let name = element_name("clients", index);
        let mut writes = pattern_words(client.pattern).to_string();
        if client.pattern.has_token() {
            writes.push_str(&format!(" (token t{})", model.token_of(state, index) + 1));
        }
        if client.token_too_long {
            writes.push_str(&format!(
                ", its token over {} characters",
                super::TOKEN_CHARS_MAX
            ));
        }
        roles.push((format!("{name}.writes"), writes));
        for (number, attempt) in client.attempts.iter().enumerate() {
            roles.push((
                format!("{name}.attempt {}", number + 1),
                attempt_words(model, attempt),
            ));
        }
        if let Some(read) = &client.reconciled {
            let items: Vec<String> = read
                .iter()
                .enumerate()
                .map(|(item, count)| format!("{} applied {count}", account(item)))
                .collect();
            roles.push((
                format!("{name}.reconciled"),
                format!("read back: {}", items.join(", ")),
            ));
        }
    }
    table_roles(state, &mut roles);
    roles.push(("clock".to_string(), format!("tick {}", state.now)));
    if state.damages_left > 0 {
        roles.push((
            "record damages left".to_string(),
            state.damages_left.to_string(),
        ));
    }
    roles
}

/// The table (applications per client, the profile's holder, the order's owner) and the
/// server's token records.
fn table_roles(state: &TokenState, roles: &mut Vec<(String, String)>) {
    for (index, applications) in state.table.applications.iter().enumerate() {
        let name = element_name("clients", index);
        let counts: Vec<String> = if applications.len() == usize::from(ACCOUNTS) {
            applications
                .iter()
                .enumerate()
                .map(|(item, count)| format!("{} {count}", account(item)))
                .collect()
        } else {
            applications.iter().map(u8::to_string).collect()
        };
        roles.push((
            format!("table: applications of {name}'s write"),
            counts.join(", "),
        ));
    }
    if let Some(holder) = state.table.profile_holder {
        roles.push((
            "table: profile".to_string(),
            format!("last put by {}", element_name("clients", holder as usize)),
        ));
    }
    if let Some(owner) = state.table.order_owner {
        roles.push((
            "table: order".to_string(),
            format!("created by {}", element_name("clients", owner as usize)),
        ));
    }
    for (owner, record) in &state.tokens {
        let phase = match record.phase {
            TokenPhase::Running => "running".to_string(),
            TokenPhase::Completed { at } => format!("completed at tick {at}"),
            TokenPhase::InvalidTimestamp => "no valid timestamp (damaged)".to_string(),
        };
        let parameters = if record.rebuilt {
            ", rebuilt parameters"
        } else {
            ""
        };
        roles.push((
            format!("token t{}", owner + 1),
            format!("{phase}{parameters}"),
        ));
    }
}
