//! One call generates typed bindings for two contracts into OUT_DIR.

fn main() -> Result<(), contractgen::GenError> {
    contractgen::Config::new()
        .contract("../../schema/contracts/kernel.json")
        .contract("../../schema/contracts/toolchannel.json")
        .compile()
}
