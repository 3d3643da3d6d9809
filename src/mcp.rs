//! `POST /mcp.php`: the dual-era MCP server (contract §6). STUB — see issue 3.
use crate::http::{Request, Response};
use crate::router::App;

pub async fn handle(app: &App, req: &mut Request) -> Response {
    let _ = (app, req);
    Response::new(501)
}
