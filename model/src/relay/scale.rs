//! What the relay model offers the checker to search larger bounds (check/scale.rs): its states
//! encode for the frontier (the serde derive of [`RelayState`]).

use super::{RelayModel, RelayState};
use crate::check::{Scale, StateCodec};

pub(super) fn hooks(_model: &RelayModel) -> Scale<RelayModel> {
    Scale {
        codec: Some(StateCodec::<RelayState>::serde()),
        ..Scale::none()
    }
}
