import CumulusServer
import Logging
import ServiceLifecycle

#if OpenTelemetry
import OTel
import Tracing
#endif

/// Spans of requests, exported over OTLP when `cumulus` is built with the `OpenTelemetry` trait
/// (`swift build -c release --traits OpenTelemetry --product cumulus`): swift-otel's tracer, configured by the standard
/// `OTEL_*` variables (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER`, …), with the W3C
/// `traceparent` of each request as the parent of its span. Built without the trait, there is no exporter and the
/// request path has no span at all.
enum RequestTracing {
    /// Bootstraps the tracer and gives it to the server; the returned service exports spans beside it.
    static func start(_ configuration: inout ServerConfiguration, logger: Logger) throws -> (any Service)? {
        #if OpenTelemetry
        var otel = OTel.Configuration.default
        otel.logs.enabled = false
        otel.metrics.enabled = false
        otel.serviceName = "cumulus"
        let observability = try OTel.bootstrap(configuration: otel)
        configuration.requestTracer = InstrumentationSystem.tracer
        logger.info("tracing requests with OpenTelemetry")
        return observability
        #else
        return nil
        #endif
    }
}
