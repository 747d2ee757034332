//! Parquet as the recorder lays out a chunk: each row group sorted by the
//! table's key and declared so (Parquet's `sorting_columns` is row-group
//! metadata), the file as a whole not, as row groups are flushed as they
//! fill. DataFusion takes the first row group's order for the whole file's,
//! and then streams windows and groupings as if the file were sorted: on a
//! chunk of several row groups `cpu_time` paired switches of different
//! row groups (negative slices; 632 % of a CPU for one thread) and
//! `GROUP BY cpu` gave a row per row group. This format is DataFusion's
//! Parquet with an order declared only for files of one row group.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::Statistics;
use datafusion::datasource::file_format::file_compression_type::FileCompressionType;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::file_format::{FileFormat, FileMeta};
use datafusion::datasource::physical_plan::parquet::metadata::{
    ordering_from_parquet_metadata, DFParquetMetadata,
};
use datafusion::datasource::physical_plan::{FileScanConfig, FileSource};
use datafusion::datasource::table_schema::TableSchema;
use datafusion::error::Result;
use datafusion::object_store::{ObjectMeta, ObjectStore};
use datafusion::physical_expr::LexOrdering;
use datafusion::physical_plan::ExecutionPlan;
use parquet::file::metadata::ParquetMetaData;

/// DataFusion's [`ParquetFormat`], trusting a file's declared order only
/// when the file is one row group.
#[derive(Debug, Default)]
pub struct ChunkFormat {
    parquet: ParquetFormat,
}

impl ChunkFormat {
    async fn metadata(
        &self,
        state: &dyn Session,
        store: &Arc<dyn ObjectStore>,
        object: &ObjectMeta,
    ) -> Result<Arc<ParquetMetaData>> {
        let cache = state.runtime_env().cache_manager.get_file_metadata_cache();
        DFParquetMetadata::new(store.as_ref(), object)
            .with_metadata_size_hint(self.parquet.metadata_size_hint())
            .with_file_metadata_cache(Some(cache))
            .fetch_metadata()
            .await
    }
}

/// The file's order: its row groups' declared order when it has one row
/// group, else none.
fn file_ordering(metadata: &ParquetMetaData, schema: &SchemaRef) -> Result<Option<LexOrdering>> {
    if metadata.num_row_groups() > 1 {
        return Ok(None);
    }
    ordering_from_parquet_metadata(metadata, schema)
}

#[async_trait]
impl FileFormat for ChunkFormat {
    fn get_ext(&self) -> String {
        self.parquet.get_ext()
    }

    fn get_ext_with_compression(&self, compression: &FileCompressionType) -> Result<String> {
        self.parquet.get_ext_with_compression(compression)
    }

    fn compression_type(&self) -> Option<FileCompressionType> {
        self.parquet.compression_type()
    }

    async fn infer_schema(
        &self,
        state: &dyn Session,
        store: &Arc<dyn ObjectStore>,
        objects: &[ObjectMeta],
    ) -> Result<SchemaRef> {
        self.parquet.infer_schema(state, store, objects).await
    }

    async fn infer_stats(
        &self,
        state: &dyn Session,
        store: &Arc<dyn ObjectStore>,
        table_schema: SchemaRef,
        object: &ObjectMeta,
    ) -> Result<Statistics> {
        self.parquet
            .infer_stats(state, store, table_schema, object)
            .await
    }

    async fn infer_ordering(
        &self,
        state: &dyn Session,
        store: &Arc<dyn ObjectStore>,
        table_schema: SchemaRef,
        object: &ObjectMeta,
    ) -> Result<Option<LexOrdering>> {
        let metadata = self.metadata(state, store, object).await?;
        file_ordering(&metadata, &table_schema)
    }

    async fn infer_stats_and_ordering(
        &self,
        state: &dyn Session,
        store: &Arc<dyn ObjectStore>,
        table_schema: SchemaRef,
        object: &ObjectMeta,
    ) -> Result<FileMeta> {
        let metadata = self.metadata(state, store, object).await?;
        let statistics =
            DFParquetMetadata::statistics_from_parquet_metadata(&metadata, &table_schema)?;
        Ok(FileMeta::new(statistics).with_ordering(file_ordering(&metadata, &table_schema)?))
    }

    async fn create_physical_plan(
        &self,
        state: &dyn Session,
        conf: FileScanConfig,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.parquet.create_physical_plan(state, conf).await
    }

    fn file_source(&self, table_schema: TableSchema) -> Arc<dyn FileSource> {
        self.parquet.file_source(table_schema)
    }
}
