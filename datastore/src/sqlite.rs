//! TODO(sqlite helper)
use crate::Result;
/// The SQLite adapter.
#[derive(Debug, Clone)]
pub struct SqliteDataStore {}
impl SqliteDataStore {
    /// Opens (creating if missing) the SQLite file at `url`.
    pub async fn connect(_url: &str) -> Result<Self> {
        todo!()
    }
}
#[async_trait::async_trait]
impl crate::DataStore for SqliteDataStore {
    async fn migrate(&self) -> Result<()> {
        todo!()
    }
    async fn upsert_episodes(&self, _: &[crate::EpisodeInfo]) -> Result<()> {
        todo!()
    }
    async fn upsert_clips(&self, _: &[crate::ClipInfo]) -> Result<()> {
        todo!()
    }
    async fn lease_next(&self, _: crate::LeaseRequest) -> Result<Option<crate::Lease>> {
        todo!()
    }
    async fn update_lease(&self, _: uuid::Uuid, _: crate::LeaseUpdate) -> Result<bool> {
        todo!()
    }
    async fn record_results(
        &self,
        _: &[crate::ResearchResult],
    ) -> Result<Vec<crate::RecordOutcome>> {
        todo!()
    }
    async fn status(&self, _: chrono::DateTime<chrono::Utc>) -> Result<crate::Status> {
        todo!()
    }
    async fn matches(&self, _: &crate::MatchFilter) -> Result<Vec<crate::Match>> {
        todo!()
    }
}
