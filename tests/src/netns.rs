//! Hosts with networks of their own on this machine, to cut one node off
//! from brokers and peers while it keeps running: each host is a network
//! namespace joined to a bridge by a veth pair, the bridge's address (the
//! gateway) is where the brokers listen, and a host's link taken down is a
//! partition (its packets are dropped, so connections time out as across
//! a real network, rather than being refused at once).
//!
//! Traffic stays on this machine: the bridge has no uplink and nothing
//! routes past it. Making namespaces needs root (`ip netns`); the names
//! and the subnet are the test process's own, so runs side by side do not
//! meet, and dropping the network deletes everything it made.

use std::process::Command;

/// One namespace on the bridge.
#[derive(Debug)]
pub struct Host {
    /// The namespace's name, for `ip netns exec`.
    pub namespace: String,
    /// Its address on the bridge: what its processes listen on.
    pub address: String,
    /// The bridge's end of its veth pair: down, the host is cut off.
    link: String,
}

/// A bridge, its gateway address, and its hosts.
#[derive(Debug)]
pub struct Network {
    bridge: String,
    gateway: String,
    hosts: Vec<Host>,
}

/// Runs `ip` with `args`; what it printed when it failed.
fn ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e} (iproute2's ip is needed)", args.join(" ")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

impl Network {
    /// A bridge with `hosts` namespaces on it, each up with its address.
    /// The subnet is `10.<a>.<b>.0/24` with `a.b` from the process id, the
    /// gateway `.1`, the hosts `.2` on.
    ///
    /// # Errors
    /// `ip` is missing, or not run as root: why, with what it said.
    pub fn new(hosts: usize) -> Result<Self, String> {
        let pid = std::process::id();
        let tag = format!("{pid:x}");
        let subnet = format!("10.{}.{}", 100 + (pid >> 8) % 100, pid % 256);
        let mut network = Self {
            bridge: format!("cb{tag}"),
            gateway: format!("{subnet}.1"),
            hosts: Vec::new(),
        };
        ip(&["link", "add", &network.bridge, "type", "bridge"])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/24", network.gateway),
            "dev",
            &network.bridge,
        ])?;
        ip(&["link", "set", &network.bridge, "up"])?;
        for n in 0..hosts {
            let host = Host {
                namespace: format!("colo-{tag}-{n}"),
                address: format!("{subnet}.{}", n + 2),
                link: format!("ch{tag}x{n}"),
            };
            let inside = format!("cn{tag}x{n}");
            ip(&["netns", "add", &host.namespace])?;
            // Pushed before it is complete: a failure below still deletes
            // the namespace.
            network.hosts.push(host);
            let host = network.hosts.last().expect("just pushed");
            let ns = host.namespace.as_str();
            ip(&[
                "link", "add", &host.link, "type", "veth", "peer", "name", &inside,
            ])?;
            ip(&["link", "set", &inside, "netns", ns])?;
            ip(&["link", "set", &host.link, "master", &network.bridge])?;
            ip(&["link", "set", &host.link, "up"])?;
            let address = format!("{}/24", host.address);
            ip(&["-n", ns, "addr", "add", &address, "dev", &inside])?;
            ip(&["-n", ns, "link", "set", &inside, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(network)
    }

    /// The bridge's own address: reachable from every host and from this
    /// machine's own namespace.
    pub fn gateway(&self) -> &str {
        &self.gateway
    }

    /// The hosts, in the order made.
    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// Cuts host `n` off: nothing goes in or out until [`Network::heal`].
    ///
    /// # Panics
    /// `ip` fails.
    pub fn cut(&self, n: usize) {
        ip(&["link", "set", &self.hosts[n].link, "down"]).expect("link down");
    }

    /// Joins host `n` to the bridge again.
    ///
    /// # Panics
    /// `ip` fails.
    pub fn heal(&self, n: usize) {
        ip(&["link", "set", &self.hosts[n].link, "up"]).expect("link up");
    }
}

impl Drop for Network {
    /// Deletes the namespaces (their veth pairs go with them) and the
    /// bridge. Processes still inside a namespace keep it until they exit:
    /// stop them first.
    fn drop(&mut self) {
        for host in &self.hosts {
            let _ = ip(&["netns", "del", &host.namespace]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}
