fn main() {
    std::process::exit(jobrun::main());
}
