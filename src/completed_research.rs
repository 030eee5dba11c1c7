//! TODO(archivists helper): completed_research archivist.
