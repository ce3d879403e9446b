//! Which fields of a message a query reads.

use std::collections::HashMap;

/// The mask of every field, to borrow.
static ALL_FIELDS: FieldMask = FieldMask { fields: None };

/// Which fields of a message to decode: all of them, or some, each with a
/// mask of its own.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct FieldMask {
    /// `None`: every field.
    pub fields: Option<HashMap<String, FieldMask>>,
}

impl FieldMask {
    /// Every field.
    pub fn all() -> FieldMask {
        FieldMask { fields: None }
    }

    /// The mask of a child field; `None` when it is not needed.
    pub fn child(&self, name: &str) -> Option<&FieldMask> {
        match &self.fields {
            None => Some(&ALL_FIELDS),
            Some(f) => f.get(name),
        }
    }

    /// Adds a path of field names.
    pub fn add_path(&mut self, path: &[String]) {
        let Some((first, rest)) = path.split_first() else {
            self.fields = None;
            return;
        };
        let Some(fields) = &mut self.fields else {
            return; // already everything
        };
        let child = fields.entry(first.clone()).or_insert_with(|| FieldMask {
            fields: Some(HashMap::new()),
        });
        child.add_path(rest);
    }

    /// Display form, for EXPLAIN.
    pub fn describe(&self) -> String {
        match &self.fields {
            None => "*".into(),
            Some(f) => {
                let mut parts: Vec<String> = f
                    .iter()
                    .map(|(k, v)| match &v.fields {
                        None => k.clone(),
                        Some(_) => format!("{k}.{}", v.describe()),
                    })
                    .collect();
                parts.sort();
                format!("{{{}}}", parts.join(", "))
            }
        }
    }
}
