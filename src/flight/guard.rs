//! The Flight service as the network sees it: request bodies are checked
//! before arrow-flight's Flight SQL dispatch decodes them, so bytes that
//! are not a Flight SQL message get an error that says so (NOT_FOUND for
//! a ticket cellar did not issue, INVALID_ARGUMENT for a command or an
//! action body that does not decode, UNIMPLEMENTED for a command cellar
//! does not know) instead of a protobuf decoder's debug output or
//! INTERNAL. Everything else passes through unchanged.

use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::{Any, Command};
use arrow_flight::{
    Action, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest, PollInfo,
    SchemaResult, Ticket, flight_descriptor::DescriptorType,
};
use prost::Message;
use tonic::{Request, Response, Status, Streaming};

use super::CellarFlightSql;
use arrow_flight::flight_service_server::FlightServiceServer;

impl CellarFlightSql {
    /// The tonic service to mount on a server (behind the checks of
    /// request bodies in `guard`).
    pub fn into_server(self) -> FlightServiceServer<GuardedFlight> {
        FlightServiceServer::new(GuardedFlight(self))
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20)
    }
}

/// [`CellarFlightSql`] behind the request checks.
#[derive(Clone)]
pub struct GuardedFlight(pub(crate) CellarFlightSql);

/// The Flight SQL command in `bytes`, or why there is none.
fn command(bytes: &[u8], what: &str, not_decoded: fn(String) -> Status) -> Result<(), Status> {
    if bytes.is_empty() {
        return Err(not_decoded(format!(
            "the {what} is empty; send the one GetFlightInfo returned"
        )));
    }
    let any = Any::decode(bytes).map_err(|_| {
        not_decoded(format!(
            "the {what} ({} bytes) is not a Flight SQL message",
            bytes.len()
        ))
    })?;
    match Command::try_from(any) {
        Ok(Command::Unknown(any)) => Err(Status::unimplemented(format!(
            "{what} type {:?} is not supported",
            shown(&any.type_url)
        ))),
        Ok(_) => Ok(()),
        Err(_) => Err(not_decoded(format!(
            "the {what} does not decode as the Flight SQL message it names"
        ))),
    }
}

/// A client-supplied name, cut short and without control characters.
fn shown(text: &str) -> String {
    text.chars()
        .take(80)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

fn descriptor(request: &Request<FlightDescriptor>) -> Result<(), Status> {
    let d = request.get_ref();
    if d.r#type == DescriptorType::Cmd as i32 {
        command(&d.cmd, "FlightDescriptor command", Status::invalid_argument)?;
    }
    Ok(())
}

/// Actions whose body arrow-flight decodes as an `Any`.
const ANY_BODY_ACTIONS: [&str; 8] = [
    "CreatePreparedStatement",
    "ClosePreparedStatement",
    "CreatePreparedSubstraitPlan",
    "BeginTransaction",
    "EndTransaction",
    "BeginSavepoint",
    "EndSavepoint",
    "CancelQuery",
];

#[tonic::async_trait]
impl FlightService for GuardedFlight {
    type HandshakeStream = <CellarFlightSql as FlightService>::HandshakeStream;
    type ListFlightsStream = <CellarFlightSql as FlightService>::ListFlightsStream;
    type DoGetStream = <CellarFlightSql as FlightService>::DoGetStream;
    type DoPutStream = <CellarFlightSql as FlightService>::DoPutStream;
    type DoExchangeStream = <CellarFlightSql as FlightService>::DoExchangeStream;
    type DoActionStream = <CellarFlightSql as FlightService>::DoActionStream;
    type ListActionsStream = <CellarFlightSql as FlightService>::ListActionsStream;

    async fn handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        FlightService::handshake(&self.0, request).await
    }

    async fn list_flights(
        &self,
        request: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        FlightService::list_flights(&self.0, request).await
    }

    async fn get_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        descriptor(&request)?;
        FlightService::get_flight_info(&self.0, request).await
    }

    async fn poll_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        descriptor(&request)?;
        FlightService::poll_flight_info(&self.0, request).await
    }

    async fn get_schema(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        descriptor(&request)?;
        FlightService::get_schema(&self.0, request).await
    }

    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        command(&request.get_ref().ticket, "ticket", Status::not_found)?;
        FlightService::do_get(&self.0, request).await
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        FlightService::do_put(&self.0, request).await
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        FlightService::do_exchange(&self.0, request).await
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        let action = request.get_ref();
        if ANY_BODY_ACTIONS.contains(&action.r#type.as_str()) {
            let body = &action.body;
            if Any::decode(body.as_ref()).is_err() {
                return Err(Status::invalid_argument(format!(
                    "the body of action {} ({} bytes) is not a Flight SQL message",
                    action.r#type,
                    body.len()
                )));
            }
        }
        FlightService::do_action(&self.0, request).await
    }

    async fn list_actions(
        &self,
        request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        FlightService::list_actions(&self.0, request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_that_are_not_flight_sql_are_named_as_such() {
        let e = command(&[0xff, 0x00, 0x12], "ticket", Status::not_found).unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound);
        assert!(e.message().contains("3 bytes") && !e.message().contains("DecodeError"));
        let unknown = Any {
            type_url: "type.googleapis.com/evil.\u{7}Thing".into(),
            value: Default::default(),
        };
        let e = command(&unknown.encode_to_vec(), "ticket", Status::not_found).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unimplemented);
        assert!(e.message().contains("evil.?Thing"), "{}", e.message());
        let e = command(&[], "ticket", Status::not_found).unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound);
        assert!(
            e.message().contains("the ticket is empty"),
            "{}",
            e.message()
        );
    }
}
