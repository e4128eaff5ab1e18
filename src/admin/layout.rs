//! What every dashboard page shows around its content, as `base.html` lays it out: who is
//! looking (the navigation and the log-out form) and the CSRF token the page's forms carry.
//! Each page holds one [`Layout`]. It depends on no handler or extractor, so that the error
//! page can use it as well as the pages do.

use super::accounts::{Role, Session};

/// Who the page is for, as the layout shows it.
pub struct Viewer {
    pub name: String,
    /// Shows what only admins may open.
    pub is_admin: bool,
}

/// The data around every page's content.
pub struct Layout {
    /// None: no navigation (logged out, or an error page).
    pub viewer: Option<Viewer>,
    pub csrf: String,
}

impl Layout {
    /// The layout of a logged-in admin's page.
    pub fn of(session: &Session) -> Layout {
        Layout {
            viewer: Some(Viewer {
                name: session.username.clone(),
                is_admin: session.role == Role::Admin,
            }),
            csrf: session.csrf_token.clone(),
        }
    }

    /// The layout of a page for no one logged in; `csrf` is its form's token, if it has one.
    pub fn logged_out(csrf: String) -> Layout {
        Layout { viewer: None, csrf }
    }
}
