//! The `colo` command.
fn main() {
    println!("colo");
}
