//! pagewise: a thin CLI over pagewise-core. Parses, calls the library, renders.

mod cli;

use clap::{CommandFactory, Parser};
use cli::{Cli, Command};

fn main() {
    pagewise_core::sys::default_sigpipe();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            // Help and version go to stdout and succeed; usage errors are fatal (exit 1).
            std::process::exit(if e.use_stderr() { 1 } else { 0 });
        }
    };
    let result = match cli.command {
        Command::Stat(a) => cli::stat::run(a),
        Command::Evict(a) => cli::evict::run(a),
        Command::Load(a) => cli::load::run(a),
        Command::Copy(a) => cli::copy::run(a),
        Command::Record(a) => cli::record::run(a),
        Command::Show(a) => cli::record::show(a),
        Command::Replay(a) => cli::record::replay(a),
        Command::Run(a) => cli::record::run_cmd(a),
        Command::Assist(a) => cli::assist::run(a),
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "pagewise",
                &mut std::io::stdout(),
            );
            Ok(0)
        }
        Command::Man { dir } => write_man(&dir).map(|_| 0),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(msg) => {
            eprintln!("pagewise: {msg}");
            std::process::exit(1);
        }
    }
}

fn write_man(dir: &std::path::Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: mkdir failed: {e}", dir.display()))?;
    let cmd = Cli::command();
    let mut pages = vec![("pagewise".to_string(), cmd.clone())];
    for sub in cmd.get_subcommands() {
        pages.push((format!("pagewise-{}", sub.get_name()), sub.clone()));
    }
    for (name, c) in pages {
        let path = dir.join(format!("{name}.1"));
        let mut buf = Vec::new();
        clap_mangen::Man::new(c.name(Box::leak(name.clone().into_boxed_str()) as &str))
            .render(&mut buf)
            .map_err(|e| format!("{}: render failed: {e}", path.display()))?;
        std::fs::write(&path, buf).map_err(|e| format!("{}: write failed: {e}", path.display()))?;
    }
    Ok(())
}
