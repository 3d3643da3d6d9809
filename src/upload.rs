//! `POST /upload.php` (contract §2.1).
use crate::http::{Request, Response};
use crate::router::App;

pub async fn handle(app: &App, req: &mut Request) -> Response {
    let _ = (app, req);
    todo!()
}
