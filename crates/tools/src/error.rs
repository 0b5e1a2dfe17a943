//! The error every tool returns: what failed, and a `hint` an agent or a person can act on.

use causeway_hint::Hint as _;

/// Why a tool call failed. MCP returns these as tool errors (`isError`), the CLI prints them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// An argument broke its schema (wrong type, out of range, unknown field, ...).
    #[error("invalid argument {field}: {rule}")]
    InvalidArgument {
        /// JSON pointer of the failing field (`/limit`), or `(arguments)` for the object.
        field: String,
        /// The rule it broke.
        rule: String,
        /// What to send instead.
        hint: String,
    },
    /// No tool with this name.
    #[error("unknown tool '{0}'")]
    UnknownTool(String),
    /// The handler ran and failed (bad SQL, unknown trace, missing data, ...).
    #[error("{message}")]
    Failed {
        /// What failed.
        message: String,
        /// What to do about it.
        hint: String,
    },
}

impl ToolError {
    /// A failure with a hint.
    pub fn failed(message: impl Into<String>, hint: impl Into<String>) -> Self {
        ToolError::Failed {
            message: message.into(),
            hint: hint.into(),
        }
    }

    /// The same error with every field through the sanitiser's final pass.
    pub fn sanitised(self) -> Self {
        use causeway_store::sanitize::sanitize_text as t;
        match self {
            ToolError::InvalidArgument { field, rule, hint } => ToolError::InvalidArgument {
                field: t(&field),
                rule: t(&rule),
                hint: t(&hint),
            },
            ToolError::UnknownTool(n) => ToolError::UnknownTool(t(&n)),
            ToolError::Failed { message, hint } => ToolError::Failed {
                message: t(&message),
                hint: t(&hint),
            },
        }
    }

    /// The one-line message (without the hint).
    pub fn message(&self) -> String {
        match self {
            ToolError::InvalidArgument { field, rule, .. } => {
                format!("invalid argument {field}: {rule}")
            }
            ToolError::UnknownTool(n) => format!("unknown tool '{n}'"),
            ToolError::Failed { message, .. } => message.clone(),
        }
    }

    /// The structured form sent to agents: `{error, hint, field?}`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({ "error": self.message(), "hint": self.hint() });
        if let ToolError::InvalidArgument { field, rule, .. } = self {
            v["field"] = field.clone().into();
            v["rule"] = rule.clone().into();
        }
        v
    }
}

impl causeway_hint::Hint for ToolError {
    /// What to do about it.
    fn hint(&self) -> Option<String> {
        Some(
            {
                match self {
                    ToolError::InvalidArgument { hint, .. } | ToolError::Failed { hint, .. } => {
                        hint
                    }
                    ToolError::UnknownTool(_) => "call tools/list for the tool names",
                }
            }
            .to_string(),
        )
    }
}

causeway_hint::register!(ToolError);

impl From<causeway_store::StoreError> for ToolError {
    fn from(e: causeway_store::StoreError) -> Self {
        let hint = e
            .hint()
            .unwrap_or_else(|| "check the trace with describe_trace".into());
        ToolError::failed(e.to_string(), hint)
    }
}

impl From<causeway_sqlguard::Rejection> for ToolError {
    fn from(r: causeway_sqlguard::Rejection) -> Self {
        ToolError::failed(format!("query refused: {}", r.reason), r.hint)
    }
}

impl From<causeway_analysis::TimeError> for ToolError {
    fn from(e: causeway_analysis::TimeError) -> Self {
        ToolError::failed(e.to_string(), e.hint().unwrap_or_default())
    }
}
