//! Values a store keeps as one JSON text (a model's count calibration, a session's timeline):
//! written and read back the same way by every backend.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Error;

/// A value a store keeps as JSON text.
pub trait StoredJson: Serialize + DeserializeOwned {
    /// What the value is, for the error when a stored text does not read back.
    const WHAT: &'static str;

    /// The value as a store keeps it.
    fn to_stored(&self) -> Result<String, Error> {
        serde_json::to_string(self).map_err(|e| Error::Backend(e.to_string()))
    }

    /// A value a store kept ([`StoredJson::to_stored`]).
    fn from_stored(text: &str) -> Result<Self, Error> {
        serde_json::from_str(text)
            .map_err(|e| Error::Backend(format!("{} that does not read back: {e}", Self::WHAT)))
    }
}
