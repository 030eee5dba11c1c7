//! TODO(archivists helper): pending_research archivist.
