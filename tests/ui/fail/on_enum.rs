use hermes_env::prelude::*;

#[hermes_env]
pub enum MyEnv {
    Easy,
    Hard,
}
