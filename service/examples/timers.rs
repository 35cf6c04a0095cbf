//! README's durable timers: a cart reminds its shopper when left alone,
//! unless checked out first; the reminder is kept with the cart's state,
//! so it comes also to a cart passivated meanwhile.
//!
//! `cargo run -p colo --example timers`

use colo::allocation::LeastShardAllocationStrategy;
use colo::{
    CoordinatorHandle, Entity, EntityContext, EntityError, EntityType, InMemoryNetwork,
    InMemoryStore, Node, NodeStore, ShardingSettings, StateSettings,
};
use serde::{Deserialize, Serialize};
use std::{sync::Arc, time::Duration};

#[derive(Default, Serialize, Deserialize)]
struct Cart {
    items: u32,
    reminders: u32,
}

#[derive(Serialize, Deserialize)]
enum CartMsg {
    Add,
    CheckOut,
    /// What the timer brings.
    Remind,
    Leave,
    Get,
}

impl Entity for Cart {
    type Message = CartMsg;
    type Reply = (u32, u32);

    async fn handle(
        &mut self,
        ctx: &EntityContext,
        msg: CartMsg,
    ) -> Result<(u32, u32), EntityError> {
        let refused = |e: colo::TimerError| EntityError::new(e.to_string());
        match msg {
            CartMsg::Add => {
                self.items += 1;
                // A timer of the same name is replaced: the reminder
                // comes 300 ms after the last item.
                ctx.schedule_after("abandoned", Duration::from_millis(300), &CartMsg::Remind)
                    .map_err(refused)?;
            }
            CartMsg::CheckOut => ctx.cancel("abandoned").map_err(refused)?,
            CartMsg::Remind => self.reminders += 1,
            CartMsg::Leave => ctx.passivate(),
            CartMsg::Get => {}
        }
        Ok((self.items, self.reminders))
    }
}

/// A node of one, its carts kept in `data`.
fn node(data: &std::path::Path) -> Result<(Node, colo::Region<Cart>), Box<dyn std::error::Error>> {
    let network = InMemoryNetwork::new();
    let settings = ShardingSettings::default();
    network.host_coordinator(CoordinatorHandle::spawn(
        "cart",
        settings.clone(),
        Box::new(LeastShardAllocationStrategy::default()),
        Arc::new(InMemoryStore::new()),
    )?);
    let store = NodeStore::open(data, StateSettings::default())?;
    let node = Node::with_state_store(network.transport("node-1"), store);
    let carts = node.start_region(
        EntityType::new("cart", |_id| Cart::default())
            .with_settings(settings)
            .durable(1),
    )?;
    Ok((node, carts))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let data = tempfile::tempdir()?;
    let ask = Duration::from_secs(5);
    let (node, carts) = node(data.path())?;
    for cart in ["cart-1", "cart-2", "cart-3"] {
        carts.ask(cart, CartMsg::Add, ask).await?;
    }
    carts.ask("cart-1", CartMsg::Leave, ask).await?; // passivated meanwhile
    carts.ask("cart-2", CartMsg::CheckOut, ask).await?; // no reminder
                                                        // Until cart-1 and cart-3 were reminded (5 s at most).
    let mut reminded = Vec::new();
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        reminded.clear();
        for cart in ["cart-1", "cart-2", "cart-3"] {
            reminded.push((cart, carts.ask(cart, CartMsg::Get, ask).await?));
        }
        if reminded.iter().filter(|(_, (_, r))| *r == 1).count() == 2 {
            break;
        }
    }
    for (cart, (items, reminders)) in reminded {
        println!("{cart}: {items} item, {reminders} reminder");
    }
    node.shutdown().await;
    Ok(())
}
