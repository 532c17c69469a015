//! A fresh DynamoDB table per test or bench case, deleted when it is dropped (passing or
//! failing), so moto's cost does not grow with the history of the run.
//!
//! Invariant: every table a [`Table`] created is deleted once, when the guard drops; clones of
//! its store share the table and must not outlive the guard.
#![allow(dead_code)]

use oncecheck_store::DynamoDbStore;

/// A table and its store; derefs to the store.
pub struct Table {
    store: DynamoDbStore,
    /// Where the table is deleted from: the endpoint itself, not a proxy that may be stalled.
    admin_endpoint: String,
}

impl Table {
    /// Creates the store's table (through the store's own client) and guards it.
    pub async fn create(store: DynamoDbStore, admin_endpoint: String) -> Table {
        store
            .create_table()
            .await
            .unwrap_or_else(|error| panic!("creating table {}: {error}", store.table()));
        Table {
            store,
            admin_endpoint,
        }
    }
}

impl std::ops::Deref for Table {
    type Target = DynamoDbStore;

    fn deref(&self) -> &DynamoDbStore {
        &self.store
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        // Drop cannot await, and the test's runtime may be a single thread blocked right here:
        // delete from a thread of its own, with a client and a runtime of its own.
        let table = self.store.table().to_owned();
        let endpoint = self.admin_endpoint.clone();
        let deleted = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime to delete the table");
            runtime.block_on(async {
                let client = oncecheck_store::dynamodb::client_for(Some(&endpoint)).await;
                client
                    .delete_table()
                    .table_name(&table)
                    .send()
                    .await
                    .is_ok()
            })
        })
        .join();
        if !matches!(deleted, Ok(true)) {
            eprintln!("could not delete the test table {}", self.store.table());
        }
    }
}
