//! `GET /api/v1/openapi.json`: the API's OpenAPI document, generated from the handlers'
//! annotations and the bodies' types (utoipa), so that it cannot drift from the code.

use axum::Json;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::error::{ErrorAnswer, LineError};

/// The API's OpenAPI document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "archivist API",
        description = "Curators and researchers anywhere, with a bearer token \
                       (`archivist token create`), in front of archivist's bus, datastore, \
                       media archive and print store."
    ),
    paths(
        crate::curators::episodes,
        crate::curators::clips,
        crate::researchers::take,
        crate::researchers::extend,
        crate::researchers::results,
        crate::researchers::finish,
        crate::researchers::release,
        crate::media::offered,
        crate::media::versions,
        crate::media::read,
        crate::media::give,
        crate::media::record,
        crate::episode_prints::get,
        crate::episode_prints::put,
        crate::readers::status,
        crate::readers::matches,
    ),
    components(schemas(
        ErrorAnswer,
        LineError,
        crate::curators::Accepted,
        crate::researchers::Taken,
        crate::researchers::Extended,
        crate::researchers::Sent,
        crate::media::Offered,
        crate::media::Given,
        crate::media::Recording,
    )),
    modifiers(&Bearer),
    security(("bearer" = [])),
    tags(
        (name = "curators", description = "Scope `curator`: curated episodes and clips."),
        (name = "researchers", description = "Scope `researcher`: work items and their results; the server's media archive and print store."),
        (name = "readers", description = "Scope `reader`: the archive's counts and matches."),
    )
)]
pub(crate) struct ApiDoc;

/// Adds the bearer scheme every path names.
struct Bearer;

impl Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The document, as JSON.
pub(crate) async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

/// The document, for the docs and tests.
pub fn openapi_json() -> String {
    ApiDoc::openapi().to_pretty_json().unwrap_or_default()
}
