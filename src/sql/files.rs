//! Local files as a server's clients reach them: DataFusion's local
//! object store, with every path checked against the allowed directories
//! as it is opened, listed, written or deleted. The planner's check
//! (`access`) names a statement's paths early and clearly; this one
//! catches what planning cannot see: the files a directory or a glob
//! lists, and a symbolic link inside an allowed directory that leads out
//! of it.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::execution::object_store::{
    DefaultObjectStoreRegistry, ObjectStoreRegistry, ObjectStoreUrl,
};
use datafusion::object_store::local::LocalFileSystem;
use datafusion::object_store::path::Path;
use datafusion::object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};

use super::access::{FileAccess, FileUse};

/// The local file system confined to a [`FileAccess`].
#[derive(Debug)]
pub(crate) struct ConfinedFiles {
    inner: LocalFileSystem,
    access: Arc<FileAccess>,
}

impl fmt::Display for ConfinedFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConfinedFiles({})", self.inner)
    }
}

/// An object store registry whose `file://` store is confined to
/// `access` (other schemes: none registered).
pub(crate) fn registry(access: &FileAccess) -> Arc<dyn ObjectStoreRegistry> {
    let registry = DefaultObjectStoreRegistry::new();
    registry.register_store(
        ObjectStoreUrl::local_filesystem().as_ref(),
        Arc::new(ConfinedFiles {
            inner: LocalFileSystem::new(),
            access: Arc::new(access.clone()),
        }),
    );
    Arc::new(registry)
}

impl ConfinedFiles {
    fn check(&self, location: &Path, use_: FileUse) -> Result<()> {
        let path = self.inner.path_to_filesystem(location)?;
        self.access.check(&path, use_).map_err(|e| {
            datafusion::object_store::Error::PermissionDenied {
                path: path.display().to_string(),
                source: Box::new(e),
            }
        })
    }
}

#[async_trait]
impl ObjectStore for ConfinedFiles {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.check(location, FileUse::Write)?;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.check(location, FileUse::Write)?;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.check(location, FileUse::Read)?;
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> Result<Vec<prost::bytes::Bytes>> {
        self.check(location, FileUse::Read)?;
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let checker = ConfinedFiles {
            inner: LocalFileSystem::new(),
            access: Arc::clone(&self.access),
        };
        let checked = locations
            .and_then(move |p| {
                let allowed = checker.check(&p, FileUse::Write).map(|()| p);
                futures::future::ready(allowed)
            })
            .boxed();
        self.inner.delete_stream(checked)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let root = prefix.cloned().unwrap_or_default();
        if let Err(e) = self.check(&root, FileUse::Read) {
            return futures::stream::once(async { Err(e) }).boxed();
        }
        let checker = ConfinedFiles {
            inner: LocalFileSystem::new(),
            access: Arc::clone(&self.access),
        };
        // A listed file that is a link out of the directory is refused
        // by name, not read.
        self.inner
            .list(prefix)
            .and_then(move |meta| {
                let allowed = checker.check(&meta.location, FileUse::Read).map(|()| meta);
                futures::future::ready(allowed)
            })
            .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.check(&prefix.cloned().unwrap_or_default(), FileUse::Read)?;
        let listed = self.inner.list_with_delimiter(prefix).await?;
        for meta in &listed.objects {
            self.check(&meta.location, FileUse::Read)?;
        }
        Ok(listed)
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.check(from, FileUse::Read)?;
        self.check(to, FileUse::Write)?;
        self.inner.copy_opts(from, to, options).await
    }
}
