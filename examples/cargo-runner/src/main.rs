//! Writes a scratch file where temporary files belong and says where that was.

fn main() {
    let scratch = std::env::temp_dir().join("cargo-runner-recipe.txt");
    std::fs::write(&scratch, "scratch\n").expect("write the scratch file");
    println!("wrote {}", scratch.display());
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_test_binary_runs_inside_a_cleanroom_root() {
        let root = std::env::var("CLEANROOM_ROOT").expect("started through the cargo runner");
        assert!(std::env::temp_dir().starts_with(&root));
        assert!(std::path::Path::new(&std::env::var("HOME").unwrap()).starts_with(&root));
    }
}
