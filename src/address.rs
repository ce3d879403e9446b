//! Opening a store by what names it: a directory, a Cloud Bigtable
//! instance, or the address a scan carries to a Ballista executor. It sits
//! above both backends, so that the embedded store's code never names the
//! Bigtable one.

use std::path::Path;

#[cfg(feature = "bigtable")]
use crate::bigtable::BigtableStore;
use crate::error::{Error, Result};
use crate::store::{FjallStore, Store, StoreOptions};

impl Store {
    /// Opens (or creates) the embedded store in directory `path`, or,
    /// with [`StoreOptions::bigtable`], that Bigtable instance.
    pub fn open_with(path: impl AsRef<Path>, options: StoreOptions) -> Result<Store> {
        match &options.bigtable {
            Some(instance) => Store::open_bigtable(instance),
            None => FjallStore::open_with(path, options).map(Store::from),
        }
    }

    /// Opens a Cloud Bigtable instance (`projects/P/instances/I`; see
    /// `BigtableStore::open`).
    #[cfg(feature = "bigtable")]
    pub fn open_bigtable(instance: &str) -> Result<Store> {
        BigtableStore::open(instance).map(|s| Store::new(std::sync::Arc::new(s)))
    }

    /// Opens a Cloud Bigtable instance: not in this build.
    #[cfg(not(feature = "bigtable"))]
    pub fn open_bigtable(instance: &str) -> Result<Store> {
        Err(Error::InvalidArgument(format!(
            "cannot open Bigtable instance {instance}: this cellar was built without the \
             Bigtable backend; build it with `cargo build --release --features bigtable`"
        )))
    }

    /// Opens the store at an [`Backend::address`]: what a Ballista
    /// executor does with the address a scan carries.
    pub fn open_address(address: &str) -> Result<Store> {
        if let Some(path) = address.strip_prefix("fjall:") {
            return Store::open(path);
        }
        if let Some(rest) = address.strip_prefix("bigtable:") {
            return Store::connect_bigtable(rest);
        }
        Err(Error::InvalidArgument(format!(
            "a store address is fjall:<directory> or bigtable:<instance>@<endpoint>, not {address:?}"
        )))
    }

    /// `<instance>@<endpoint>`, as a Bigtable store's address has it.
    #[cfg(feature = "bigtable")]
    fn connect_bigtable(at: &str) -> Result<Store> {
        let (instance, endpoint) = at.rsplit_once('@').ok_or_else(|| {
            Error::InvalidArgument(format!(
                "a Bigtable store address is bigtable:<instance>@<endpoint>, not bigtable:{at:?}"
            ))
        })?;
        BigtableStore::connect(instance, endpoint).map(|s| Store::new(std::sync::Arc::new(s)))
    }

    #[cfg(not(feature = "bigtable"))]
    fn connect_bigtable(at: &str) -> Result<Store> {
        Store::open_bigtable(at)
    }
}
