//! The vocabulary of filesystem rules shared by the policy, its compiler and the kernel
//! mechanisms: what access a rule grants, and how an applied rule ended up enforced.
//!
//! Invariant: [`Access`] is ordered from weakest to strongest, so merging two rules on one path
//! takes the minimum and never widens what either granted.

use std::path::PathBuf;

use serde::Serialize;

/// What a process may do with a path and everything beneath it; ordered from weakest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// Nothing: not even read (and not listed, where a mount hides it).
    None,
    /// Read files, list directories, execute.
    Read,
    /// Everything, including create, remove, rename, truncate and device ioctls.
    Write,
}

/// One filesystem rule.
#[derive(Clone, Debug, Serialize)]
pub struct Rule {
    /// The path it applies to, with everything beneath it.
    pub path: PathBuf,
    /// The access granted there.
    pub access: Access,
    /// Why the rule exists, for reports (`"the real home (password database)"`).
    pub reason: String,
}

/// How one rule is enforced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EnforcedBy {
    /// A Landlock rule on the path or an ancestor (or, for `none`, Landlock handling the rights).
    Landlock,
    /// A read-only bind mount.
    ReadOnlyMount,
    /// An empty tmpfs or `/dev/null` mounted over it.
    HiddenByMount,
    /// A copy of the original mount put back over a read-only one.
    ExposedByMount,
    /// Landlock grants on its parent's other entries (the cover).
    Cover,
    /// The path does not exist; its parent's rule decides.
    Absent,
    /// Not enforced (no Landlock, and the policy allowed best effort).
    NotEnforced,
}

/// One rule as applied.
#[derive(Clone, Debug, Serialize)]
pub struct AppliedRule {
    /// The canonical path (as given when it does not exist).
    pub path: PathBuf,
    /// The access.
    pub access: Access,
    /// Why the rule exists.
    pub reason: String,
    /// How it is enforced.
    pub enforced_by: EnforcedBy,
    /// For a rule the compiler added at another place that shows a rule's object (a bind
    /// mount of it, or of a part of it): the rule whose object it shows. A policy built on top
    /// of this one's rules leaves these out: they follow from its own rules and mounts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias_of: Option<PathBuf>,
}

impl AppliedRule {
    /// Whether a policy built on top of these rules takes this one: it is enforced (its object
    /// exists) and is not an alias the compiler added (see [`AppliedRule::alias_of`]).
    pub fn is_a_base_rule(&self) -> bool {
        self.enforced_by != EnforcedBy::Absent && self.alias_of.is_none()
    }
}
