//! Generates the Rust bindings of the built-in contracts and the jobs fixture into OUT_DIR.

fn main() -> Result<(), contractgen::GenError> {
    contractgen::Config::new()
        .contracts([
            "../../schema/contracts/kernel.json",
            "../../schema/contracts/xsession.json",
            "../../schema/contracts/rukh.json",
            "../../schema/contracts/toolchannel.json",
            "../../schema/contracts/mcp.json",
            // A contract the project did not write for itself: the jobs fixture.
            "../../proxy/tests/fixtures/jobs.json",
        ])
        .compile()
}
