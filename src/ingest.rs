//! TODO(archivists helper): ingest archivist.
