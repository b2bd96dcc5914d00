//! The start-up checks of [`Builder::build`](super::Builder::build): every `#[idempotent]`
//! endpoint it covers names a scope with a resolver and, in atomic mode, gets transactions
//! from the store. Faces check what else they serve in their [`FaceSetup`](super::FaceSetup),
//! asking [`Checks::covers_path`] which handlers the checks cover.

use super::error::BuildError;
use crate::endpoint::{self, Endpoint};
use crate::settings::scope::Scopes;
use crate::store::Capabilities;

/// Which `#[idempotent]` endpoints are checked.
pub(super) enum Checks {
    All,
    Under(Vec<String>),
    None,
}

impl Checks {
    /// Checks the endpoints under `module` too (and, from the first call, only those).
    pub(super) fn add_module(&mut self, module: String) {
        match self {
            Self::Under(modules) => modules.push(module),
            checks => *checks = Self::Under(vec![module]),
        }
    }

    fn covers(&self, endpoint: &Endpoint) -> bool {
        self.covers_path(endpoint.handler())
    }

    pub(super) fn covers_path(&self, handler: &str) -> bool {
        match self {
            Self::All => true,
            Self::Under(modules) => modules.iter().any(|m| in_module(handler, m)),
            Self::None => false,
        }
    }

    /// The first endpoint covered that the engine could not serve.
    pub(super) fn run(
        &self,
        scopes: &Scopes,
        capabilities: &Capabilities,
        store: &'static str,
    ) -> Result<(), BuildError> {
        for ep in endpoint::registered().filter(|ep| self.covers(ep)) {
            if scopes.check(ep.scope()).is_err() {
                return Err(BuildError::UnresolvedScope {
                    endpoint: ep.handler(),
                    scope: ep.scope(),
                });
            }
            if let Some(need) = ep.atomic().filter(|need| !need.is_met(capabilities)) {
                return Err(BuildError::AtomicUnsupported {
                    endpoint: ep.handler(),
                    database: need.database(),
                    store,
                });
            }
        }
        Ok(())
    }
}

/// Whether `path` (`a::b::f`) is `module` or inside it.
fn in_module(path: &str, module: &str) -> bool {
    path.strip_prefix(module)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
}

#[cfg(test)]
mod tests {
    use super::in_module;

    #[test]
    fn module_prefixes_match_whole_segments() {
        assert!(in_module("app::admin::create", "app::admin"));
        assert!(in_module("app::admin", "app::admin"));
        assert!(!in_module("app::administrator::create", "app::admin"));
        assert!(!in_module("other::admin::create", "app::admin"));
    }
}
