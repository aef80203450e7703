//! Tool calling in a request (`tools` and `tool_choice`): the functions checked, the grammar
//! that forces a call when one is required, and the calls in OpenAI's shape (`model::tools`
//! knows each family's syntax and takes the calls out of a reply; `requests.rs` renders the
//! conversation with them).

use anyhow::{Result, bail};
use serde_json::{Value, json};

use crate::model::chat::ChatTemplate;
use crate::model::generate::Generation;
use crate::model::tokenizer::Tokenizer;
use crate::model::tools::{ToolCall, ToolSyntax};

/// What `tool_choice` asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// No call: the functions are not shown to the model.
    None,
    /// The model decides (OpenAI's default when there are tools).
    Auto,
    /// One call of any of the functions.
    Required,
    /// One call of this function.
    Named(String),
}

/// A request's tools, checked: the functions and what the choice asks.
pub struct Tools<'r> {
    pub tools: &'r Value,
    pub functions: Vec<&'r Value>,
    pub choice: ToolChoice,
    pub syntax: ToolSyntax,
}

impl<'r> Tools<'r> {
    /// The request's tools, if it gives any and does not turn them off; an error for malformed
    /// ones, or for a model whose template takes none.
    pub fn of(
        tools: Option<&'r Value>,
        tool_choice: Option<&Value>,
        template: &ChatTemplate,
    ) -> Result<Option<Tools<'r>>> {
        let choice = match tool_choice {
            None => ToolChoice::Auto,
            Some(Value::String(s)) if s == "none" => ToolChoice::None,
            Some(Value::String(s)) if s == "auto" => ToolChoice::Auto,
            Some(Value::String(s)) if s == "required" => ToolChoice::Required,
            Some(v) => match v["function"]["name"].as_str() {
                Some(name) if v["type"] == "function" => ToolChoice::Named(name.to_string()),
                _ => bail!(
                    "tool_choice must be \"none\", \"auto\", \"required\" or \
                     {{\"type\": \"function\", \"function\": {{\"name\": …}}}}"
                ),
            },
        };
        let Some(tools) = tools else {
            if tool_choice.is_some() {
                bail!("tool_choice needs tools");
            }
            return Ok(None);
        };
        let Some(list) = tools.as_array() else {
            bail!("tools must be a list of {{\"type\": \"function\", \"function\": {{…}}}}");
        };
        let mut functions = Vec::with_capacity(list.len());
        for (i, tool) in list.iter().enumerate() {
            let f = &tool["function"];
            if tool["type"] != "function" || !f["name"].is_string() {
                bail!(
                    "tools[{i}] must be {{\"type\": \"function\", \"function\": {{\"name\": …}}}}"
                );
            }
            if !f["parameters"].is_null() && !f["parameters"].is_object() {
                bail!("tools[{i}].function.parameters must be a JSON schema object");
            }
            functions.push(f);
        }
        if let ToolChoice::Named(name) = &choice
            && !functions.iter().any(|f| f["name"] == name.as_str())
        {
            bail!("tool_choice names {name:?}, which is not among the tools");
        }
        if functions.is_empty() || choice == ToolChoice::None {
            return Ok(None);
        }
        let Some(syntax) = template.tool_syntax() else {
            bail!("this model's chat template takes no tools");
        };
        Ok(Some(Tools {
            tools,
            functions,
            choice,
            syntax,
        }))
    }

    /// The grammar that makes the reply one call, when the choice requires one.
    pub fn grammar(&self) -> Result<Option<String>> {
        let functions: Vec<&Value> = match &self.choice {
            ToolChoice::Required => self.functions.clone(),
            ToolChoice::Named(name) => self
                .functions
                .iter()
                .copied()
                .filter(|f| f["name"] == name.as_str())
                .collect(),
            ToolChoice::Auto | ToolChoice::None => return Ok(None),
        };
        match self.syntax.call_grammar(&functions) {
            Ok(g) => Ok(Some(g)),
            Err(e) => bail!("tool_choice {:?}: {e}; use \"auto\"", self.choice),
        }
    }

    /// A generated reply's content and calls.
    pub fn parse(&self, reply: &Generation, tok: &Tokenizer) -> (String, Vec<ToolCall>) {
        let raw = || tok.decode(&reply.tokens, false).unwrap_or_default();
        self.syntax.parse_reply(&reply.text, raw, &self.functions)
    }
}

/// A reply's calls in OpenAI's shape, with ids `call_<prefix>_<i>`.
pub fn calls_json(calls: &[ToolCall], id_prefix: &str) -> Vec<Value> {
    calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            json!({
                "id": format!("call_{id_prefix}_{i}"),
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            })
        })
        .collect()
}
