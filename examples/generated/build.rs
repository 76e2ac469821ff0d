//! Generates the Rust bindings of all four contracts into OUT_DIR.

fn main() -> Result<(), contractgen::GenError> {
    contractgen::Config::new()
        .contracts([
            "../../schema/contracts/kernel.json",
            "../../schema/contracts/xsession.json",
            "../../schema/contracts/rukh.json",
            "../../schema/contracts/toolchannel.json",
        ])
        .compile()
}
